"""A grading command that is its container's first process (PID 1) becomes the container's init.

Why: bubblewrap's outer process exits as soon as it has read its sandbox's exit status, before
its own child (the sandbox's pid 1) has been reaped. That child is then handed to the init of
the pid namespace, which must reap it. On a machine that init is systemd; in a Kubernetes pod
whose ``command`` is ``tinygpt-grading-service run`` (hub/z2jh/grading-service.yaml) or
``tinygpt-grade-class`` (grade-job.yaml) it is the command itself, and Python reaps only the
children it started: one zombie stays per sandbox, two per graded submission, for the life of
the pod, each holding a pid (the pod's pids limit) and a count of its uid (RLIMIT_NPROC).
PID 1 also gets no signal it has no handler for, even SIGTERM from the kubelet.

So, as PID 1, :func:`become_init` forks (as tini does, with the stopping signals blocked until
PID 1 has its handlers): the child returns and runs the command;
PID 1 reaps every process handed to it, passes the stopping signals on to the command, and exits
with the command's status (128 + the signal that ended it). When PID 1 exits, Linux ends every
process left in the namespace. Anywhere else it does nothing.
"""
import os
import signal

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def become_init():
    """Call first in a command's main, before any thread starts; returns in the process that runs
    the command (this one, unless it is PID 1)."""
    if os.getpid() != 1:
        return
    # Blocked until PID 1's handlers are in: a signal sent in between (the command may send one at
    # once, the kubelet too) waits, pending, instead of being dropped as PID 1 drops what it has no
    # handler for. The command gets the mask it had.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    command = os.fork()
    if command == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return

    def forward(signum, frame):
        try:
            os.kill(command, signum)
        except ProcessLookupError:      # reaped just now: PID 1 is on its way out with its status
            pass
    for signum in FORWARDED:
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)    # what is pending is forwarded now
    while True:
        pid, status = os.waitpid(-1, 0)         # an orphaned sandbox's pid 1, or the command
        if pid == command:
            code = os.waitstatus_to_exitcode(status)
            os._exit(128 - code if code < 0 else code)
