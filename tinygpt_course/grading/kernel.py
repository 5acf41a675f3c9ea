"""The kernel nbgrader's execute step starts, inside the grading sandbox.

RobustExecute sets ``kernel_manager_class`` to :class:`SandboxedKernelManager`, so every kernel
that grades a notebook (``nbgrader autograde`` and the formgrader's button alike) is an ipykernel
in bubblewrap (tinygpt_course.grading.sandbox). No host folder is writable from it: not
nbgrader's ``autograded/<student>/<assignment>/`` (nbgrader's own output, which it walks, chmods
and copies), not a connection folder. The kernel's folder (WORK) and its connection file and
IPC sockets (INSIDE) are on the sandbox's own size-capped /tmp, gone with the sandbox; the
connection file is copied in by bubblewrap. The grader never connects by a path the sandbox
controls: once the kernel has made its five sockets (before any learner code can run), each is
opened as a handle (``O_PATH``), walked to from ``/proc/<sandbox's PID 1>/root`` one component at
a time without following any link, and checked to be a socket; the grader then connects (and
ZeroMQ reconnects, whenever a connection drops) through ``/proc/self/fd/<handle>``, by links in
a folder of the grader's own (itself reached as ``/proc/self/fd/<its handle>``: a socket address
holds at most 107 bytes, however deep the folder). A kernel that swaps a socket for a link to a host path, then drops
the grader's connections, sees the grader come back to its own socket, never to the host's
(tests/test_kernelfork.py). The executed notebook comes back in the kernel's messages, as
in stock nbgrader; nothing learner code wrote is ever read, walked or removed by the grader.
The kernel's stdout and stderr are a pipe the grader reads and logs, line by line, capped and
marked with the student (template.KernelOutput); the grader's own stderr is not the kernel's.

With ``c.SandboxedKernelManager.fork_from_template = True`` (the default), the kernel is not
started but forked from a warm kernel template that has imported torch, matplotlib, ipykernel
and the course library once per grading process (tinygpt_course.grading.template): the same
sandbox is started, with a placeholder in it, and the fork joins it before it runs anything.
That saves the 1.3 s of CPU a kernel start and ``import torch`` cost every notebook. A kernel
command other than the Python kernel's, or a template that cannot start, gets a cold start: the
placeholder becomes the kernel.
"""
import asyncio
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, DottedObjectName

from .sandbox import Sandbox, sandbox_env
from .template import TemplateUnavailable, start_forked, start_sandbox

INSIDE = "/tmp/kernel"      # in the sandbox: the kernel's connection file and IPC sockets
WORK = "/tmp/work"          # in the sandbox: the kernel's folder
PORTS = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
SOCKETS_TIMEOUT = 60        # seconds a kernel has to make its sockets (nbclient's startup_timeout)


class NotASocket(OSError):
    """What the sandbox shows at a kernel socket's path is not a socket (a link, a file)."""


def open_socket(root, path):
    """An O_PATH handle on the socket at `path` (absolute, as the sandbox sees it) under the
    sandbox's root `root`, walked to without following any link; None while it does not exist."""
    parts = [p for p in path.split("/") if p]
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)      # the kernel's own root link
    try:
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                return None
            os.close(fd)
            fd = nxt
            mode = os.fstat(fd).st_mode
            if i < len(parts) - 1 and not stat.S_ISDIR(mode):
                raise NotASocket(f"{path}: {part} is not a folder (mode {mode:o})")
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise NotASocket(f"{path} is not a socket (mode {os.fstat(fd).st_mode:o})")
        fd, handle = None, fd
        return handle
    finally:
        if fd is not None:
            os.close(fd)


def _is_python_kernel(cmd):
    """The command jupyter_client made from the python3 kernel spec, for this Python."""
    return (len(cmd) >= 3 and cmd[1:3] == ["-m", "ipykernel_launcher"]
            and os.path.realpath(cmd[0]) == os.path.realpath(sys.executable))


class SandboxedKernelManager(AsyncKernelManager):
    """An AsyncKernelManager whose kernel runs in the grading sandbox."""

    fork_from_template = Bool(True, help=(
        "Fork each grading kernel from a warm template process (one per grading process) that has "
        "imported torch, matplotlib, ipykernel and the course library, instead of starting it: "
        "the fork enters the same sandbox a started kernel gets. False: start every kernel afresh, "
        "as stock nbgrader does.")).tag(config=True)

    _run_dir = None         # the grader's own folder for the connection file (never in a sandbox)
    _box = None             # the template.Sandboxed the kernel runs in, which goes at cleanup
    _join_sandbox = True    # tests/test_kernelfork.py switches it off to show the join is the defence
    _join_cgroups = True    # and this, to show that joining the sandbox's cgroups is what caps a forked kernel
    _by_handle = True       # and this, to show that connecting by handle is what keeps the grader out of host paths
    _handles = ()           # the O_PATH handles on the kernel's sockets

    # ready when the kernel says it is idle, not after 0.2 s of quiet (grading/ready.py)
    client_class = DottedObjectName("tinygpt_course.grading.ready.ReadyClient")

    async def _async_finish_shutdown(self, waittime=None, pollinterval=0.1, restart=False):
        """jupyter_client's, looking every 10 ms instead of 100 for the kernel to have ended
        after its shutdown request: a sandboxed kernel ends in a few ms, and polling costs
        nothing (a pidfd, or a child's wait)."""
        await super()._async_finish_shutdown(waittime, min(pollinterval, 0.01), restart)

    finish_shutdown = _async_finish_shutdown

    @property
    def sandbox(self):
        if getattr(self, "_sandbox", None) is None:
            self._sandbox = Sandbox(config=self.config, log=self.log)
        return self._sandbox

    async def _async_pre_start_kernel(self, **kw):
        self.sandbox.require()
        if self.sandbox.enabled:
            self._run_dir = tempfile.mkdtemp(prefix="tinygpt-kernel-")
            self.transport = "ipc"
            self.connection_file = os.path.join(self._run_dir, "kernel.json")
            self.ip = f"{INSIDE}/ipc"             # as the kernel sees it
        return await super()._async_pre_start_kernel(**kw)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if not self.sandbox.enabled:
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        cwd = os.path.realpath(kw.get("cwd") or os.getcwd())
        who = "/".join(Path(cwd).parts[-2:])        # autograded/<student>/<assignment>
        passed = {k: v for k, v in (kw.get("env") or {}).items() if k == "NBGRADER_EXECUTION"}
        # as stock nbgrader, the kernel sees NBGRADER_EXECUTION; its parent is the sandbox's PID 1
        # (ipykernel then watches no parent and prints no banner)
        env = sandbox_env({**passed, "JPY_PARENT_PID": "1"})
        inner = f"{INSIDE}/kernel.json"
        kernel_cmd = [inner if a == self.connection_file else a for a in kernel_cmd]
        with open(self.connection_file) as f:
            files = {inner: f.read()}
        box = start_sandbox(self.sandbox, WORK, files, self.log, who, argv=kernel_cmd, env=env)
        try:
            if not (self.fork_from_template and _is_python_kernel(kernel_cmd)):
                box.go()
            else:
                try:
                    start_forked(self.sandbox, box, kernel_cmd[3:], env, WORK, join=self._join_sandbox,
                                 join_cgroups=self._join_cgroups)
                except TemplateUnavailable as exc:
                    self.log.warning("%s: starting the kernel instead", exc)
                    box.go()
        except BaseException:
            box.close()
            raise
        p = self.provisioner
        p.process, p.pid, p.pgid, p.cwd = box, box.pid, None, cwd
        self._box = box
        self._reconcile_connection_info(p.connection_info)
        if self._by_handle:
            self.ip = await self._connect_by_handle(box)
        else:                   # the defence off: by the sandbox's path, which its links can redirect
            self.ip = f"/proc/{box.ns_pid}/root{INSIDE}/ipc"

    async def _connect_by_handle(self, box):
        """Wait for the kernel's five sockets, open a handle on each, and link `<ip>-<port>` in our
        own folder to it (``/proc/self/fd/N``: the grader's own handle, whichever thread connects).
        Returns that ip."""
        root, handles = f"/proc/{box.ns_pid}/root", {}
        deadline = time.monotonic() + SOCKETS_TIMEOUT
        try:
            while len(handles) < len(PORTS):
                for key in PORTS:
                    if key not in handles:
                        fd = open_socket(root, f"{INSIDE}/ipc-{getattr(self, key)}")
                        if fd is not None:
                            handles[key] = fd
                if len(handles) == len(PORTS):
                    break
                if box.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the kernel made {len(handles)} of its {len(PORTS)} sockets, then "
                                       + ("ended" if box.poll() is not None else f"nothing in {SOCKETS_TIMEOUT} s"))
                await asyncio.sleep(0.01)
        except BaseException:
            for fd in handles.values():
                os.close(fd)
            raise
        for key, fd in handles.items():
            os.symlink(f"/proc/self/fd/{fd}", os.path.join(self._run_dir, f"ipc-{getattr(self, key)}"))
        # and our folder by a handle too: a socket's address holds at most 107 bytes, and the
        # folder may be deep (tinygpt-grade-class's run folder in a course's tmp/)
        folder = os.open(self._run_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._handles = (*handles.values(), folder)
        return f"/proc/self/fd/{folder}/ipc"

    async def _async_interrupt_kernel(self):
        # the kernel is in its own session and PID namespace: a signal to bwrap's process group
        # does not reach it, an interrupt_request on the control channel does
        if self.sandbox.enabled and self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"
        await super()._async_interrupt_kernel()

    interrupt_kernel = _async_interrupt_kernel      # jupyter_client binds the base one by name

    async def _async_cleanup_resources(self, restart=False):
        for fd in self._handles:
            os.close(fd)
        self._handles = ()
        if self._box is not None:
            self._box.close()              # the sandbox goes, with whatever learner code left in it
            self._box = None
        if self._run_dir:
            # jupyter_client removes the connection file and "<ip>-<port>": only ever in our own folder
            self.ip = os.path.join(self._run_dir, "ipc")
        await super()._async_cleanup_resources(restart=restart)
        if self._run_dir:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    cleanup_resources = _async_cleanup_resources
