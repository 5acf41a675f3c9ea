"""The grader's side of the kernel template (tinygpt_course.kernelfork, which it never imports).

:func:`start_sandbox` starts a sandbox (bubblewrap, running a placeholder) for a kernel or a
re-run job; :func:`start_forked` then asks this process's kernel template to fork a kernel into
it, without paying a kernel start (a cold start tells the placeholder to become the kernel). The
result, :class:`Sandboxed`, stands where jupyter_client keeps its ``subprocess.Popen``; removing
the sandbox (:meth:`Sandboxed.close`) ends every process in it.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .. import wire
from .sandbox import sandbox_env

READY_TIMEOUT = 180
# PID 2 of the sandbox: says "ready" once the sandbox is complete, then waits for a line on its
# stdin: "go" runs the arguments after it (a cold start's kernel); a forked kernel's sandbox gets
# none, and goes when the grader closes that pipe
# The kernel's sockets are made with umask 0: a grader that is not root connects to them from
# outside the sandbox's uid (nothing else can reach the sandbox's /tmp)
PLACEHOLDER = ["/bin/sh", "-c", 'echo ready; read go || exit 0; umask 000; exec "$@"', "sandbox"]
LINE_CAP, LOG_CAP = 500, 256 * 1024      # characters of one logged line, bytes logged per kernel


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


def start_warm(module, *args, **streams):
    """``python -m <module> <args>`` as every warm server is started (the kernel template, the
    re-run zygote and its spawner): with the sandbox's environment and the kept matplotlib
    folder, in /, in a session of its own; `streams` are Popen's stdin, stdout, stderr."""
    return subprocess.Popen([sys.executable, "-m", module, *args],
                            env=sandbox_env({"MPLCONFIGDIR": _matplotlib_cache()}), cwd="/",
                            start_new_session=True, **streams)


class KernelTemplate:
    """`python -m tinygpt_course.kernelfork.server`, started once per grading process, or once
    for a parent and the workers it forks (:func:`share`). Starting it does not wait for it:
    it imports and draws (2 s of CPU) while the grader goes on; its first use waits until it is
    ready (:meth:`ready`)."""

    lock = None             # set when shared: one request at a time
    failed = False          # this process saw it fail: it starts its own next time
    is_ready = False

    def __init__(self):
        self.proc = start_warm("tinygpt_course.kernelfork.server", stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def ready(self):
        """Wait until the template has said it is ready (once); TemplateUnavailable if it ended."""
        if not self.is_ready:
            try:
                wire.read_reply(self.proc.stdout.fileno(), READY_TIMEOUT)
            except wire.Gone as exc:
                self.failed = True
                self.close()
                raise TemplateUnavailable(f"the kernel template did not start ({exc})") from None
            self.is_ready = True
        return self

    def fork(self, job, timeout=60):
        self.ready()            # a shared template is ready before the workers are forked
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
    """The template this process uses: the one its parent shared, else its own (started, perhaps
    not ready yet)."""
    if _shared is not None and not _shared.failed:
        return _shared
    t = _templates.get(os.getpid())
    if t is None or t.failed or t.proc.poll() is not None:
        t = _templates[os.getpid()] = KernelTemplate()
    return t


def start():
    """Start this process's template now and go on: a class run calls it before it reads the
    course, so that the template's imports run beside the grader's own (2 cores: both busy)."""
    template()


def share(ctx):
    """This process's template, ready, for the processes it forks from now on (class-grading
    workers) to use one request at a time, instead of each paying for a template of its own."""
    global _shared
    t = template().ready()
    t.lock = ctx.Lock()
    _shared = t


def _printable(text):
    """A kernel's line as the log shows it: control characters (\\r, escapes) spelled out."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class KernelOutput(threading.Thread):
    """Reads what a sandbox's processes write to their stdout and stderr (one pipe, never the
    grader's own stderr) and logs it, each line marked with whose kernel it came from and
    capped: LINE_CAP characters a line, LOG_CAP bytes in all (the rest is read and dropped)."""

    def __init__(self, stream, log, who):
        super().__init__(daemon=True, name=f"kernel output of {who}")
        self.stream, self.log, self.who, self.logged, self.dropped = stream, log, who, 0, 0
        self.start()

    def run(self):
        for raw in iter(lambda: self.stream.readline(65536), b""):
            if self.logged >= LOG_CAP:
                self.dropped += len(raw)
                continue
            self.logged += len(raw)
            line = _printable(raw.decode(errors="replace").rstrip("\n"))
            if len(line) > LINE_CAP:
                line = line[:LINE_CAP] + f"... ({len(line) - LINE_CAP} more characters)"
            self.log.warning("[kernel of %s] %s", self.who, line)
        if self.dropped:
            self.log.warning("[kernel of %s] ... %d more bytes of output not logged", self.who, self.dropped)


class Sandboxed:
    """A sandbox (bubblewrap, with the placeholder in it) where jupyter_client keeps a kernel's
    Popen: the kernel is the placeholder itself after :meth:`go` (a cold start), or a process
    forked into the sandbox (:meth:`adopt`), watched through a pidfd, whose exit status is not
    seen (0 once it has ended). :meth:`close` removes the sandbox: its PID 1 goes, and every
    process in it with it."""

    stdin = stdout = stderr = None

    def __init__(self, placeholder, ns_pid, output, output_w):
        self.placeholder, self.ns_pid, self.output = placeholder, ns_pid, output
        self.output_w = output_w        # the output pipe's write end, for the kernel template's fork
        self.pid, self.returncode, self.pidfd = placeholder.pid, None, None

    def go(self):
        self.placeholder.stdin.write(b"go\n")
        self.placeholder.stdin.flush()
        self.release()
        return self

    def adopt(self, pid):
        self.pid, self.pidfd = pid, os.pidfd_open(pid)
        self.release()
        return self

    def release(self):
        """Close our copy of the output pipe's write end: the pipe ends with the sandbox."""
        if self.output_w is not None:
            os.close(self.output_w)
            self.output_w = None

    def poll(self):
        if self.pidfd is None:
            self.returncode = self.placeholder.poll()
        elif self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = 0
        return self.returncode

    def wait(self, timeout=None):
        if self.pidfd is None:
            self.returncode = self.placeholder.wait(timeout)
            return self.returncode
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            select.select([self.pidfd], [], [], 0.1)
        return self.returncode

    def send_signal(self, signum):
        if self.pidfd is None:
            self.placeholder.send_signal(signum)
        elif self.poll() is None:
            signal.pidfd_send_signal(self.pidfd, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def close(self):
        self.release()
        if self.placeholder.poll() is None:
            self.placeholder.kill()
        self.placeholder.wait()
        self.output.join(timeout=10)    # the pipe ends with the sandbox's last process: all logged
        for f in (self.placeholder.stdin, self.placeholder.stdout):
            f.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def _ended(proc, out_w, first=b""):
    """Kill a sandbox that did not come up; what it had written (bubblewrap's error, after the
    `first` line read already), one line."""
    proc.kill()
    proc.wait()
    os.close(out_w)
    os.set_blocking(proc.stdout.fileno(), False)
    try:
        said = first + (proc.stdout.read(4096) or b"")
    except OSError:
        said = first
    proc.stdout.close()
    return _printable(" ".join(said.decode(errors="replace").split()))[:LINE_CAP]


def start_sandbox(sandbox, chdir, files, log, who, argv=(), env=None, timeout=30):
    """Start a sandbox with the placeholder in it (followed by `argv`, which `go` runs);
    return it as :class:`Sandboxed`, its output logged by a :class:`KernelOutput`."""
    info_r, info_w = os.pipe()
    out_r, out_w = os.pipe()            # the sandbox's stdout and stderr
    cmd = sandbox.wrap(PLACEHOLDER + list(argv), chdir=chdir, files=files,
                       bwrap_args=["--info-fd", str(info_w)])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out_w, stderr=out_w,
                            pass_fds=[info_w], env=env or sandbox_env(), start_new_session=True)
    os.close(info_w)
    proc.stdout = os.fdopen(out_r, "rb")
    try:
        deadline, info, first = time.monotonic() + timeout, b"", b""
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
        first = proc.stdout.readline() if select.select([proc.stdout], [], [], max(0, deadline - time.monotonic()))[0] \
            else b""
        if first != b"ready\n":
            raise TemplateUnavailable("the sandbox did not come up")
    except TemplateUnavailable as exc:
        said = _ended(proc, out_w, first)
        raise TemplateUnavailable(f"{exc}{f': {said}' if said else ''}") from None
    except BaseException:
        _ended(proc, out_w)
        raise
    finally:
        os.close(info_r)
    return Sandboxed(proc, ns_pid, KernelOutput(proc.stdout, log, who), out_w)


def start_forked(sandbox, box, argv, env, cwd, join=True, join_cgroups=True):
    """A kernel forked from the template into the sandbox `box` (from :func:`start_sandbox`);
    `argv` are ipykernel's arguments. join=False leaves the fork outside the sandbox, and
    join_cgroups=False outside its cgroups: only for the tests that show what they stop."""
    pid = template().fork({"ns_pid": box.ns_pid, "argv": list(argv), "env": env, "cwd": cwd,
                           "limits": sandbox.rlimits(), "join": join, "join_cgroups": join_cgroups,
                           "uid": sandbox.uid, "seccomp": sandbox.seccomp_program(),
                           "grader_pid": os.getpid(), "output_fd": box.output_w})
    return box.adopt(pid)
