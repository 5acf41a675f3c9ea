"""The kernel nbgrader's execute step starts, inside the grading sandbox.

RobustExecute sets ``kernel_manager_class`` to :class:`SandboxedKernelManager`, so every kernel
that grades a notebook (``nbgrader autograde`` and the formgrader's button alike) is an ipykernel
started by bubblewrap (tinygpt_course.grading.sandbox). The kernel talks to nbgrader over the IPC
transport: its connection file and sockets sit in a private folder bound into the sandbox. The
only other folder it can write is the one nbgrader runs the notebook in,
``autograded/<student>/<assignment>/``, where the notebooks themselves are hidden from it (the
copy nbgrader is grading holds the hidden tests).
"""
import glob
import os
import shutil
import tempfile

from jupyter_client.manager import AsyncKernelManager

from .sandbox import Sandbox, sandbox_env


class SandboxedKernelManager(AsyncKernelManager):
    """An AsyncKernelManager whose kernel runs in the grading sandbox."""

    _run_dir = None

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
            kernel_cmd = self.sandbox.wrap(kernel_cmd, writable=[cwd, self._run_dir], hidden=hidden, chdir=cwd)
            passed = {k: v for k, v in (kw.get("env") or {}).items() if k == "NBGRADER_EXECUTION"}
            kw["env"] = sandbox_env(passed)     # as stock nbgrader, the kernel sees NBGRADER_EXECUTION
        await super()._async_launch_kernel(kernel_cmd, **kw)

    async def _async_interrupt_kernel(self):
        # the kernel is in its own session and PID namespace: a signal to bwrap's process group
        # does not reach it, an interrupt_request on the control channel does
        if self.sandbox.enabled and self.kernel_spec is not None:
            self.kernel_spec.interrupt_mode = "message"
        await super()._async_interrupt_kernel()

    interrupt_kernel = _async_interrupt_kernel      # jupyter_client binds the base one by name

    async def _async_cleanup_resources(self, restart=False):
        await super()._async_cleanup_resources(restart=restart)
        if self._run_dir and not restart:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None

    cleanup_resources = _async_cleanup_resources
