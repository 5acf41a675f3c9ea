"""The grading kernel's client, ready as soon as its kernel is.

jupyter_client's ``wait_for_ready`` asks for ``kernel_info`` until the reply comes, then takes
any IOPub message within 0.2 s as proof that IOPub is connected (a SUB socket misses what is
published before its subscription reaches the kernel), then reads IOPub until it has been
quiet for 0.2 s. Each grading kernel paid that last 0.2 s in full: a third of a forked kernel's
whole start, time in which nothing runs. Here the proof is the kernel's own last word on that
request, its ``idle`` status (sent after the reply, on IOPub): once it is in, IOPub is connected
and holds nothing more of the request, so what is already there is read without waiting. A
kernel whose idle does not come within the same 0.2 s is asked again, as jupyter_client does.
"""
import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_core.utils import ensure_async

IOPUB_WAIT = 0.2            # seconds for the idle status after the reply (jupyter_client's wait)


class ReadyClient(AsyncKernelClient):
    """An AsyncKernelClient whose wait_for_ready ends when the kernel's idle status is in."""

    async def _idle_after(self, msg_id):
        """Whether IOPub brings the kernel's idle status for request `msg_id` within IOPUB_WAIT."""
        end = time.monotonic() + IOPUB_WAIT
        while (left := end - time.monotonic()) > 0:
            try:
                msg = await ensure_async(self.iopub_channel.get_msg(timeout=left))
            except Empty:
                return False
            if (msg["msg_type"] == "status" and msg["parent_header"].get("msg_id") == msg_id
                    and msg["content"].get("execution_state") == "idle"):
                return True
        return False

    async def _async_wait_for_ready(self, timeout=None):
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                msg = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                pass
            else:
                if msg["msg_type"] == "kernel_info_reply" and await self._idle_after(msg["parent_header"].get("msg_id")):
                    self._handle_kernel_info_reply(msg)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")
        while True:         # what an earlier request left on IOPub: read now, no wait
            try:
                await ensure_async(self.iopub_channel.get_msg(timeout=0))
            except Empty:
                break

    wait_for_ready = _async_wait_for_ready
