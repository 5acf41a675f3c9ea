"""The system calls no grading sandbox may make: a seccomp filter, built here as BPF.

Namespaces wall off files, processes, the network, IPC and users; some kernel objects are in
no namespace at all, and what learner code makes there outlives its sandbox and is seen by the
next one (and by other users on the machine). The calls below are the ones an *unprivileged*
process may make that no namespace covers; the ones that need a capability (mount, kexec,
modules, open_by_handle_at, ...: Docker's and Podman's default profiles deny those too) already
fail, since the sandbox holds no capability. Each is answered EPERM, as Docker's profile does:

======================  ==================================================================
``add_key``,            kernel keyrings (session, user, persistent): in no namespace; a key
``request_key``,        added by one learner's kernel is listed in ``/proc/keys`` by the next
``keyctl``              learner's on the same worker, and lasts past its sandbox
``bpf``                 BPF maps and programs: kernel objects of the machine; a large attack
                        surface (Docker: needs CAP_SYS_ADMIN; denied)
``perf_event_open``     the machine's performance counters (Docker: denied; another process's
                        timing can leak through them)
``userfaultfd``         stalls the kernel on a page fault at will: the classic aid to kernel
                        exploits (Docker: denied)
``io_uring_setup``,     a second way into nearly every call, which seccomp filters of other
``io_uring_enter``,     calls do not see; a frequent source of kernel bugs (Docker 25+:
``io_uring_register``   denied)
======================  ==================================================================

A call of another ABI than the machine's own (32-bit x86 on x86-64, x32) is denied whole: the
filter would otherwise have to list each call again under its other number, and nothing a
lesson runs uses them. Nothing a lesson, torch, numpy, matplotlib or ipykernel does needs any
of these.

Installed twice over, by the same program: bubblewrap's ``--seccomp`` for every process it
starts (launch.py hands it the program in a memfd), and :func:`install` in a process forked
from a warm template after it joined a sandbox (tinygpt_course.zygote.join_sandbox), which
bubblewrap never started. Standard library only.
"""
import ctypes
import os
import platform
import struct

# (number on x86-64, number on arm64); io_uring's are the same on every architecture
SYSCALLS = {
    "add_key": (248, 217), "request_key": (249, 218), "keyctl": (250, 219),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
}
DENIED = tuple(SYSCALLS)                   # Sandbox.denied_syscalls' default
ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1), "arm64": (0xC00000B7, 1)}
X32_BIT = 0x40000000                       # x86-64's x32 ABI: the same numbers with this bit set

# classic BPF, as <linux/filter.h> and <linux/seccomp.h> define it
LD_W_ABS, JEQ_K, JGE_K, RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW, RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM = 1
NR, ARCH = 0, 4                            # offsets in struct seccomp_data


def _op(code, k, jt=0, jf=0):
    return struct.pack("=HBBI", code, jt, jf, k)


def program(names=DENIED, machine=None):
    """The filter (struct sock_filter[], as bubblewrap's --seccomp reads it) that answers EPERM to
    each of `names` and to every call of another ABI, and lets the rest through."""
    unknown = [n for n in names if n not in SYSCALLS]
    if unknown:
        raise ValueError(f"no syscall number known for {', '.join(unknown)} (known: {', '.join(SYSCALLS)})")
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise ValueError(f"no seccomp filter for {machine!r} (known: {', '.join(ARCHES)})")
    arch, column = ARCHES[machine]
    numbers = sorted({SYSCALLS[n][column] for n in names})
    deny = len(numbers) + 1                # from the x32 test: a jump over the list and "allow"
    ops = [_op(LD_W_ABS, ARCH), _op(JEQ_K, arch, 1, 0), _op(RET_K, RET_ERRNO | EPERM), _op(LD_W_ABS, NR)]
    if machine == "x86_64":
        ops.append(_op(JGE_K, X32_BIT, deny, 0))
    for i, nr in enumerate(numbers):       # the i-th test jumps over the rest and "allow"
        ops.append(_op(JEQ_K, nr, len(numbers) - i, 0))
    ops += [_op(RET_K, RET_ALLOW), _op(RET_K, RET_ERRNO | EPERM)]
    return b"".join(ops)


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2


def install(code):
    """Apply the filter `code` (from :func:`program`) to this process and all it starts; it cannot
    be removed. Sets no_new_privs first, as an unprivileged filter requires."""
    n = len(code) // 8
    filters = (_Filter * n).from_buffer_copy(code)
    prog = _Program(n, filters)
    libc = ctypes.CDLL(None, use_errno=True)
    for args in ((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                 (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0)):
        if libc.prctl(*[ctypes.c_ulong(a) for a in args]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp filter: {os.strerror(err)}")
