"""The seccomp filter (tinygpt_course/grading/seccomp.py), on its own: the program it builds
refuses exactly the listed calls once installed. Its use in every sandbox, started or forked,
is tests/test_kernelfork.py's (a kernel key never reaches the next learner)."""
import ctypes
import os
import platform

import pytest

from tinygpt_course.grading import seccomp

MACHINE = platform.machine()
COLUMN = {"x86_64": 0, "aarch64": 1}.get(MACHINE)


def in_child(fn):
    """Run `fn` in a forked child (the filter cannot be removed); its exit code."""
    pid = os.fork()
    if pid == 0:
        try:
            os._exit(fn())
        except BaseException:
            os._exit(99)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def add_key():
    libc = ctypes.CDLL(None, use_errno=True)
    key = libc.syscall(seccomp.SYSCALLS["add_key"][COLUMN], b"user", f"tinygpt-test-{os.getpid()}".encode(),
                       b"v", 1, ctypes.c_int(-2))                           # the process keyring
    return 0 if key >= 0 else ctypes.get_errno()


def test_the_program_is_whole_instructions_and_refuses_unknown_names():
    code = seccomp.program(machine="x86_64")
    assert len(code) % 8 == 0 and len(code) // 8 == 4 + 1 + len(seccomp.DENIED) + 2
    assert len(seccomp.program(machine="aarch64")) // 8 == 4 + len(seccomp.DENIED) + 2
    with pytest.raises(ValueError, match="no syscall number known for mount"):
        seccomp.program(["add_key", "mount"])
    with pytest.raises(ValueError, match="no seccomp filter for 'riscv64'"):
        seccomp.program(machine="riscv64")


@pytest.mark.skipif(COLUMN is None, reason="x86-64 and arm64 only")
def test_installed_it_refuses_add_key_and_lets_the_rest_through():
    assert in_child(add_key) == 0                                   # no filter: a key is made
    def filtered():
        seccomp.install(seccomp.program())
        return add_key() if os.getpid() > 0 and os.listdir("/") else 98
    assert in_child(filtered) == 1                                  # EPERM, and the rest worked
    def other_call_only():
        seccomp.install(seccomp.program(["bpf"]))
        return add_key()
    assert in_child(other_call_only) == 0                           # only what is listed


@pytest.mark.skipif(MACHINE != "x86_64", reason="the x32 ABI is x86-64's")
def test_a_call_by_the_x32_numbers_is_refused():
    libc = ctypes.CDLL(None, use_errno=True)
    def x32_getpid():
        seccomp.install(seccomp.program())
        return 0 if libc.syscall(0x40000000 | 39) >= 0 else ctypes.get_errno()
    assert in_child(x32_getpid) == 1
