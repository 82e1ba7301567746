"""A seccomp filter for sandboxes: the kernel keyring system calls fail with ``EPERM``.

Keys live outside every namespace bubblewrap makes: a user's keyring is per user ID, so a sandboxed process
running as the pipeline's user shares it with the host and with every other sandbox, and the kernel does not
charge key payloads to a memory cgroup (about 24 MiB for root, ``kernel.keys.root_maxbytes``). A package
could keep data there between calls, uncounted, or leave it for a later run. Nothing a package or server
needs uses keys, so ``add_key``, ``request_key`` and ``keyctl`` are refused.

The filter is a classic BPF program (what ``bwrap --seccomp FD`` reads): check the architecture, then the
system call number. On an architecture it does not know (:data:`KEYRING_CALLS`) there is no filter, and the
sandbox record says so.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# (AUDIT_ARCH_*, syscall numbers of add_key, request_key, keyctl)
KEYRING_CALLS = {
    "x86_64": (0xC000003E, (248, 249, 250)),
    "aarch64": (0xC00000B7, (217, 218, 219)),
}

_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ARCH_OFFSET, _NR_OFFSET = 4, 0  # struct seccomp_data: int nr; __u32 arch; ...
_ALLOW, _EPERM = 0x7FFF0000, 0x00050000 | errno.EPERM
_X32 = 0x40000000  # x86_64's x32 ABI: the same calls under other numbers


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program() -> bytes | None:
    """The filter for this machine's architecture, or None where it is not known. A system call of another
    ABI (i386, x32) fails with EPERM too, so none reaches the keyring calls under another number."""
    known = KEYRING_CALLS.get(platform.machine())
    if known is None:
        return None
    arch, calls = known
    tests = [(_JGE_K, _X32), *((_JEQ_K, nr) for nr in calls)]
    refuse = 4 + len(tests) + 1  # index of the final "return EPERM"
    insns = [
        _insn(_LD_W_ABS, 0, 0, _ARCH_OFFSET),
        _insn(_JEQ_K, 1, 0, arch),
        _insn(_RET_K, 0, 0, _EPERM),
        _insn(_LD_W_ABS, 0, 0, _NR_OFFSET),
    ]
    for i, (op, k) in enumerate(tests):
        insns.append(_insn(op, refuse - (4 + i) - 1, 0, k))
    insns += [_insn(_RET_K, 0, 0, _ALLOW), _insn(_RET_K, 0, 0, _EPERM)]
    return b"".join(insns)


def filter_fd() -> int | None:
    """A readable fd holding :func:`program` (the caller passes it to bwrap and closes it), or None."""
    code = program()
    if code is None:
        return None
    read, write = os.pipe()
    os.write(write, code)  # a few dozen bytes: fits the pipe's buffer
    os.close(write)
    return read
