"""A seccomp filter that keeps sandbox commands from making user namespaces.

User namespaces are the kernel's largest attack surface open to an unprivileged process (inside
one it holds every capability over new mount, network and other namespaces). Sandbox commands
never need one. The filter, installed in the command's forked child before it execs (after
`no_new_privs`, see environments/rollout/sandbox/isolation.py), is inherited by everything the command
starts and cannot be removed:

- `unshare` and `clone` with CLONE_NEWUSER fail with EPERM;
- `clone3` fails with ENOSYS (its flags are in memory a filter cannot read; the C library then
  falls back to `clone`, which is checked);
- system calls of another ABI (32-bit or x32 entry points) fail with EPERM.

Everything else is allowed: the namespaces wrapper still makes its mount, PID, IPC, UTS, network
and cgroup namespaces. Built for x86_64 and aarch64; elsewhere `userns_filter()` is None (logged).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import platform
import struct

log = logging.getLogger("environments.rollout.sandbox.sandbox")

CLONE_NEWUSER = 0x10000000
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SYSCALLS = {  # (unshare, clone, clone3)
    "x86_64": (272, 56, 435),
    "aarch64": (97, 220, 435),
}
_X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_OFFSET_NR, _OFFSET_ARCH, _OFFSET_ARG0 = 0, 4, 16  # struct seccomp_data (arg0's low word, little endian)


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def filter_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions for `machine` (pure; see the module doc)."""
    unshare, clone, clone3 = _SYSCALLS[machine]
    eperm = _RET_ERRNO | errno.EPERM
    enosys = _RET_ERRNO | errno.ENOSYS
    x32 = machine == "x86_64"
    # Instruction indices, so that each jump can name its target.
    program: list[tuple[int, int, int, int]] = [
        (_LD_W_ABS, 0, 0, _OFFSET_ARCH),  # 0
        (_JEQ_K, 0, 0, _AUDIT_ARCH[machine]),  # 1: jf -> DENY
        (_LD_W_ABS, 0, 0, _OFFSET_NR),  # 2
    ]
    if x32:
        program.append((_JGE_K, 0, 0, _X32_SYSCALL_BIT))  # jt -> DENY
    program += [
        (_JEQ_K, 0, 0, clone3),  # jt -> NOSYS
        (_JEQ_K, 0, 0, unshare),  # jt -> FLAGS
        (_JEQ_K, 0, 0, clone),  # jt -> FLAGS
        (_RET_K, 0, 0, _RET_ALLOW),
        (_LD_W_ABS, 0, 0, _OFFSET_ARG0),  # FLAGS
        (_JSET_K, 0, 0, CLONE_NEWUSER),  # jt -> DENY
        (_RET_K, 0, 0, _RET_ALLOW),
        (_RET_K, 0, 0, eperm),  # DENY
        (_RET_K, 0, 0, enosys),  # NOSYS
    ]
    deny, nosys = len(program) - 2, len(program) - 1
    flags = len(program) - 5

    def jump(at: int, target: int) -> int:
        return target - at - 1

    out = []
    for at, (code, jt, jf, k) in enumerate(program):
        if at == 1:
            jf = jump(at, deny)
        elif code == _JGE_K:
            jt = jump(at, deny)
        elif code == _JEQ_K and k == clone3 and at > 1:
            jt = jump(at, nosys)
        elif code == _JEQ_K and k in (unshare, clone) and at > 1:
            jt = jump(at, flags)
        elif code == _JSET_K:
            jt = jump(at, deny)
        out.append((code, jt, jf, k))
    return out


class UserNamespaceFilter:
    """The compiled filter, kept alive for the preexec functions that install it."""

    def __init__(self, program: list[tuple[int, int, int, int]]) -> None:
        self._instructions = (_SockFilter * len(program))(*(_SockFilter(*i) for i in program))
        self._prog = _SockFprog(len(program), self._instructions)
        self.address = ctypes.addressof(self._prog)
        """What `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, address)` takes."""
        self.program_bytes = b"".join(struct.pack("=HBBI", *i) for i in program)
        """The raw `struct sock_filter` array, as `bwrap --seccomp FD` reads it."""


@functools.cache
def userns_filter() -> UserNamespaceFilter | None:
    """The filter for this machine's architecture, or None where it is not built (logged once)."""
    machine = platform.machine()
    if machine not in _SYSCALLS or struct.calcsize("P") != 8:
        log.warning("sandbox: no seccomp filter for %s: commands may create user namespaces", machine)
        return None
    return UserNamespaceFilter(filter_program(machine))
