"""The grader's side of the kernel template (tinygpt_course.kernelfork, which it never imports).

:func:`start_forked` puts a learner kernel in the grading sandbox without paying a kernel start:
it starts the kernel's sandbox (bubblewrap, exactly as for a cold start, running a placeholder),
then asks this process's kernel template to fork a kernel into it. The result,
:class:`ForkedKernel`, stands where jupyter_client keeps its ``subprocess.Popen``; removing the
sandbox (:meth:`ForkedKernel.close`) ends every process in it.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

from .. import wire
from .sandbox import sandbox_env

READY_TIMEOUT = 180
PLACEHOLDER = ["/bin/sh", "-c", "echo ready; exec cat"]     # PID 2 of the sandbox until stdin closes


class TemplateUnavailable(RuntimeError):
    """The template or the sandbox placeholder did not start; the caller starts a cold kernel."""


def _matplotlib_cache():
    """The template's matplotlib folder: the grader's own (outside the sandbox, /tmp is shared),
    kept between runs so that matplotlib's font list is built once."""
    path = os.path.join(os.path.expanduser("~"), ".cache", "tinygpt-course", "matplotlib")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        if os.stat(path).st_uid == os.getuid() and os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="tinygpt-matplotlib-")


class KernelTemplate:
    """`python -m tinygpt_course.kernelfork.server`, started once per grading process, or once
    for a parent and the workers it forks (:func:`share`)."""

    lock = None             # set when shared: one request at a time
    failed = False          # this process saw it fail: it starts its own next time

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "tinygpt_course.kernelfork.server"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=sandbox_env({"MPLCONFIGDIR": _matplotlib_cache()}),
                                     cwd="/", start_new_session=True)
        try:
            wire.read_reply(self.proc.stdout.fileno(), READY_TIMEOUT)
        except wire.Gone as exc:
            self.close()
            raise TemplateUnavailable(f"the kernel template did not start ({exc})") from None

    def fork(self, job, timeout=60):
        if self.lock is not None and not self.lock.acquire(timeout=timeout):
            self.failed = True          # a worker died holding it: this one starts its own
            raise TemplateUnavailable("the shared kernel template is held by a worker that died")
        try:
            wire.write(self.proc.stdin, job)
            reply, _ = wire.read_reply(self.proc.stdout.fileno(), timeout)
        except (wire.Gone, OSError) as exc:
            self.failed = True
            self.close()
            raise TemplateUnavailable(f"the kernel template ended ({exc})") from None
        finally:
            if self.lock is not None:
                self.lock.release()
        if "error" in reply:
            raise TemplateUnavailable(f"the kernel could not enter its sandbox ({reply['error']})")
        return reply["pid"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_templates = {}
_shared = None


def template():
    """The template this process uses: the one its parent shared, else its own."""
    if _shared is not None and not _shared.failed:
        return _shared
    t = _templates.get(os.getpid())
    if t is None or t.failed or t.proc.poll() is not None:
        t = _templates[os.getpid()] = KernelTemplate()
    return t


def share(ctx):
    """Start this process's template now, for the processes it forks from now on (class-grading
    workers) to use one request at a time, instead of each paying for a template of its own."""
    global _shared
    _shared = template()
    _shared.lock = ctx.Lock()


class ForkedKernel:
    """What jupyter_client needs of a kernel's Popen, for a kernel that is not our child: it is
    watched through a pidfd, and its exit status is not seen (0 once it has ended)."""

    stdin = stdout = stderr = None

    def __init__(self, pid, placeholder):
        self.pid, self.placeholder, self.returncode = pid, placeholder, None
        self.pidfd = os.pidfd_open(pid)

    def poll(self):
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = 0
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            select.select([self.pidfd], [], [], 0.1)
        return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:
            signal.pidfd_send_signal(self.pidfd, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def close(self):
        """Remove the sandbox: its PID 1 goes, and every process in it with it."""
        if self.placeholder.poll() is None:
            self.placeholder.kill()
        self.placeholder.wait()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def start_sandbox(sandbox, writable, hidden, chdir, timeout=30):
    """Start the sandbox with a placeholder in it; return (Popen, host pid of its PID 1)."""
    info_r, info_w = os.pipe()
    argv = sandbox.wrap(PLACEHOLDER, writable=writable, hidden=hidden, chdir=chdir,
                        bwrap_args=["--info-fd", str(info_w)])
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            pass_fds=[info_w], env=sandbox_env(), start_new_session=True)
    os.close(info_w)
    try:
        deadline, info = time.monotonic() + timeout, b""
        while True:                     # bubblewrap writes {"child-pid": N, ...} when it has cloned
            if not select.select([info_r], [], [], max(0, deadline - time.monotonic()))[0]:
                raise TemplateUnavailable("bubblewrap gave no pid in time")
            chunk = os.read(info_r, 4096)
            if not chunk:
                raise TemplateUnavailable("bubblewrap ended before its sandbox was made")
            info += chunk
            try:
                ns_pid = json.loads(info)["child-pid"]
                break
            except ValueError:
                continue
        # the placeholder speaks once the sandbox is complete (mounts, then exec)
        if not select.select([proc.stdout], [], [], max(0, deadline - time.monotonic()))[0] \
                or proc.stdout.readline() != b"ready\n":
            raise TemplateUnavailable("the sandbox did not come up")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        os.close(info_r)
    return proc, ns_pid


def start_forked(sandbox, argv, env, cwd, writable, hidden, join=True):
    """A kernel forked from the template into a fresh sandbox; `argv` are ipykernel's arguments.
    join=False leaves the fork outside the sandbox: only for the test that shows what it stops."""
    placeholder, ns_pid = start_sandbox(sandbox, writable, hidden, cwd)
    try:
        pid = template().fork({"ns_pid": ns_pid, "argv": list(argv), "env": env, "cwd": cwd,
                               "limits": sandbox.rlimits(), "join": join,
                               "grader_pid": os.getpid()})
        return ForkedKernel(pid, placeholder)
    except BaseException:
        placeholder.kill()
        placeholder.wait()
        raise
