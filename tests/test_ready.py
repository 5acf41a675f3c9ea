"""grading/ready.py: the grading kernel's client is ready when its kernel's idle status is in,
and leaves nothing of the handshake for the notebook's first cell to read. Fast."""
import asyncio

import pytest
from jupyter_client.manager import AsyncKernelManager

from tinygpt_course.grading.ready import ReadyClient


class AnyIdleClient(ReadyClient):
    """The mistake: any idle status taken as the end of the handshake, whatever request it ends."""

    async def _idle_after(self, msg_id):
        from queue import Empty
        end = asyncio.get_running_loop().time() + 0.2
        while (left := end - asyncio.get_running_loop().time()) > 0:
            try:
                msg = await self.iopub_channel.get_msg(timeout=left)
            except Empty:
                return False
            if msg["msg_type"] == "status" and msg["content"].get("execution_state") == "idle":
                return True
        return False


async def started(client_class):
    km = AsyncKernelManager(kernel_name="python3")
    km.client_class = f"{client_class.__module__}.{client_class.__qualname__}"
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)
    return km, kc


async def first_cell_sees():
    """The parent request of every IOPub message read while the first cell runs after ready."""
    km, kc = await started(ReadyClient)
    try:
        cell = kc.execute("print('first')")
        parents = []
        while True:
            msg = await kc.iopub_channel.get_msg(timeout=30)
            parents.append(msg["parent_header"].get("msg_id"))
            if msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == cell \
                    and msg["content"]["execution_state"] == "idle":
                return cell, parents
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


def test_the_first_cell_reads_only_its_own_messages():
    """Nothing of the handshake (its requests' busy and idle) is left for the notebook's first cell."""
    cell, parents = asyncio.run(first_cell_sees())
    assert set(parents) == {cell}, parents


async def idle_after(client_class):
    """(whether the handshake ends on the idle of a request never sent, on its own request's)."""
    km, kc = await started(client_class)
    try:
        kc.kernel_info()                # answered, busy and idle published: IOPub is connected now
        await kc.shell_channel.get_msg(timeout=30)
        other = await kc._idle_after("a request never sent")
        kc.kernel_info()
        reply = await kc.shell_channel.get_msg(timeout=30)
        return other, await kc._idle_after(reply["parent_header"]["msg_id"])
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)


@pytest.mark.parametrize("client_class, other", [(ReadyClient, False), (AnyIdleClient, True)],
                         ids=["its_own_idle", "any_idle_taken"])
def test_the_handshake_ends_on_its_own_requests_idle(client_class, other):
    assert asyncio.run(idle_after(client_class)) == (other, True)
