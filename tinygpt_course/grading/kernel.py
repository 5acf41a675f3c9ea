"""The kernel nbgrader's execute step starts, inside the grading sandbox.

RobustExecute sets ``kernel_manager_class`` to :class:`SandboxedKernelManager`, so every kernel
that grades a notebook (``nbgrader autograde`` and the formgrader's button alike) is an ipykernel
started by bubblewrap (tinygpt_course.grading.sandbox). The kernel talks to nbgrader over the IPC
transport: its connection file and sockets sit in a private folder bound into the sandbox. The
only other folder it can write is the one nbgrader runs the notebook in,
``autograded/<student>/<assignment>/``, where the notebooks themselves are hidden from it (the
copy nbgrader is grading holds the hidden tests).

With ``c.SandboxedKernelManager.fork_from_template = True`` (the default), the kernel is not
started but forked from a warm kernel template that has imported torch, matplotlib, ipykernel
and the course library once per grading process (tinygpt_course.grading.template): the same
sandbox is started, with a placeholder in it, and the fork joins it before it runs anything.
That saves the 1.3 s of CPU a kernel start and ``import torch`` cost every notebook. A kernel
command other than the Python kernel's, or a template that cannot start, gets a cold start.
"""
import glob
import os
import shutil
import sys
import tempfile

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool

from .sandbox import Sandbox, sandbox_env
from .template import TemplateUnavailable, start_forked


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

    _run_dir = None
    _forked = None          # the ForkedKernel, whose sandbox goes at cleanup
    _join_sandbox = True    # tests/test_kernelfork.py switches it off to show the join is the defence

    @property
    def sandbox(self):
        if getattr(self, "_sandbox", None) is None:
            self._sandbox = Sandbox(config=self.config, log=self.log)
        return self._sandbox

    async def _async_pre_start_kernel(self, **kw):
        self.sandbox.require()
        if self.sandbox.enabled:
            self._run_dir = tempfile.mkdtemp(prefix="tinygpt-kernel-")
            os.chmod(self._run_dir, 0o700)
            self.transport = "ipc"
            self.connection_file = os.path.join(self._run_dir, "kernel.json")
            self.ip = os.path.join(self._run_dir, "ipc")
        return await super()._async_pre_start_kernel(**kw)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if self.sandbox.enabled:
            cwd = os.path.realpath(kw.get("cwd") or os.getcwd())
            hidden = sorted(glob.glob(os.path.join(glob.escape(cwd), "*.ipynb")))
            passed = {k: v for k, v in (kw.get("env") or {}).items() if k == "NBGRADER_EXECUTION"}
            kw["env"] = sandbox_env(passed)     # as stock nbgrader, the kernel sees NBGRADER_EXECUTION
            if self.fork_from_template and _is_python_kernel(kernel_cmd):
                try:
                    kernel = start_forked(self.sandbox, kernel_cmd[3:], kw["env"], cwd,
                                          writable=[cwd, self._run_dir], hidden=hidden, join=self._join_sandbox)
                except TemplateUnavailable as exc:
                    self.log.warning("%s: starting the kernel instead", exc)
                else:
                    self._adopt(kernel, cwd)
                    return
            kernel_cmd = self.sandbox.wrap(kernel_cmd, writable=[cwd, self._run_dir], hidden=hidden, chdir=cwd)
        await super()._async_launch_kernel(kernel_cmd, **kw)

    def _adopt(self, kernel, cwd):
        """Hand a forked kernel to the provisioner where it keeps the Popen it launches."""
        p = self.provisioner
        p.process, p.pid, p.pgid, p.cwd = kernel, kernel.pid, None, cwd
        self._forked = kernel
        self._reconcile_connection_info(p.connection_info)

    async def _async_interrupt_kernel(self):
        # the kernel is in its own session and PID namespace: a signal to bwrap's process group
        # does not reach it, an interrupt_request on the control channel does
        if self.sandbox.enabled and self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"
        await super()._async_interrupt_kernel()

    interrupt_kernel = _async_interrupt_kernel      # jupyter_client binds the base one by name

    async def _async_cleanup_resources(self, restart=False):
        await super()._async_cleanup_resources(restart=restart)
        if self._forked is not None:
            self._forked.close()           # the sandbox goes, with whatever learner code left in it
            self._forked = None
        if self._run_dir and not restart:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    cleanup_resources = _async_cleanup_resources
