"""The system calls a sandboxed process may make: an allowlist, as container runtimes keep one.

Everything not listed fails with ``EPERM`` (Docker's and Podman's default profiles do the same; ``clone3`` fails
with ``ENOSYS`` so that the C library falls back to ``clone``, whose flags the filter can read). The list is
what the runtimes the pipeline runs need: CPython with torch and transformers (the ``hf`` and ``python``
runtimes, GPTQModel), llama.cpp through llama-cpp-python, the servers (uvicorn with uvloop and httptools, the
relay) and the HumanEval judge's standard-library interpreter; on CUDA the NVIDIA driver's library needs
``ioctl`` and ``mmap`` on its device files (not yet run under the filter). It was built by running each of them
under this filter with the default action set to *log* (``SCMP_ACT_LOG``; ``tests/seccomp_log.py``) and adding
what the kernel logged; ``docs/sandbox.md`` has the table. To admit a new runtime, run its honest tests that way
and add what it needs to the group it belongs to, with who needs it.

What is left out on purpose (:data:`REFUSED`) is every way to hold memory outside the sandbox's memory cgroup
or its count, and every way to read state that other sandboxes share:

- ``memfd_secret`` (secret memory, which the cgroup files as page cache that is not shared memory), hugetlb
  pages (``MAP_HUGETLB``, ``MFD_HUGETLB``; never charged to a cgroup v1 memory controller), the SysV and POSIX
  IPC objects, the kernel keyrings, io_uring and AIO, BPF maps, perf buffers, ``userfaultfd``, new namespaces
  and mounts (a ``ramfs`` in a user namespace of its own is page cache that no reclaim can drop), KSM merging;
- ``mincore``, ``cachestat``, ``readahead``, ``preadv2(RWF_NOWAIT)``, ``posix_fadvise(WILLNEED|DONTNEED)`` and
  ``madvise(WILLNEED|COLD|PAGEOUT)``: the page cache of the read-only runtime files is the host's, shared with
  every other sandbox; these read or reset which of its pages are resident, a channel between sandboxes (one
  that slower probes still reach: a fault on a file mapping, the time of a read; ``docs/sandbox.md``);
  ``inotify``/``fanotify``, whose events on a shared file are every reader's;
- a package worker opens Unix sockets only: on cgroup v1, TCP buffers are not charged to the memory cgroup
  (64 MiB queued on a loopback connection inside a sandbox were charged nothing), and a worker has no use for
  a network. A server's profile adds IPv4, IPv6 and routing netlink sockets, and so does an engine's: the
  worker of the ``vllm`` runtime, whose code is vLLM's and the pipeline's only (the package brings weights, no
  code), and whose one-process ``torch.distributed`` group opens a gloo TCP device on loopback.

Memory that may be locked is bounded by ``RLIMIT_MEMLOCK`` (:data:`MEMLOCK_BYTES`), set before bubblewrap runs
(:mod:`.launch`); the sandbox has no capability to raise it.

The filter is compiled by libseccomp (the library runc, crun and systemd use) through its ``ctypes`` binding
``pyseccomp``, and handed to ``bwrap --seccomp FD`` as the classic BPF program libseccomp exports: it checks the
architecture (a system call of another ABI, i386 or x32, is refused too) and then the call and its arguments.
"""

from __future__ import annotations

import errno
import functools
import os
import tempfile
from dataclasses import dataclass
from typing import Literal

Profile = Literal["worker", "server", "engine"]

MEMLOCK_BYTES = 64 << 10  # RLIMIT_MEMLOCK inside every sandbox (Docker's default): no runtime locks memory

# Flags the filter reads in arguments (x86_64 and aarch64 share these values)
MAP_HUGETLB = 0x40000
MFD_HUGETLB = 0x4
RWF_NOWAIT = 0x8
CLONE_NEW_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
NETLINK_ROUTE = 0
# madvise advice a runtime may give: anything about its own anonymous memory, not about the shared page cache
# (WILLNEED 3, COLD 20, PAGEOUT 21) and not KSM (MERGEABLE 12, UNMERGEABLE 13) or memory errors (100, 101)
MADVISE_ALLOWED = {
    "NORMAL": 0,
    "RANDOM": 1,
    "SEQUENTIAL": 2,
    "DONTNEED": 4,
    "FREE": 8,
    "REMOVE": 9,
    "DONTFORK": 10,
    "DOFORK": 11,
    "HUGEPAGE": 14,
    "NOHUGEPAGE": 15,
    "DONTDUMP": 16,
    "DODUMP": 17,
    "WIPEONFORK": 18,
    "KEEPONFORK": 19,
    "POPULATE_READ": 22,
    "POPULATE_WRITE": 23,
    "DONTNEED_LOCKED": 24,
    "COLLAPSE": 25,
    "GUARD_INSTALL": 102,
    "GUARD_REMOVE": 103,
}
FADVISE_ALLOWED = {"NORMAL": 0, "RANDOM": 1, "SEQUENTIAL": 2, "NOREUSE": 5}  # not WILLNEED 3, DONTNEED 4
# personality(2) values Docker's profile allows: query, PER_LINUX, UNAME26 variants
PERSONALITY_ALLOWED = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)


@dataclass(frozen=True)
class Group:
    """System calls allowed together, and who needs them."""

    what: str
    needed_by: str
    calls: tuple[str, ...]


GROUPS: tuple[Group, ...] = (
    Group(
        "memory of its own",
        "every runtime (the allocator, the dynamic loader, torch's and llama.cpp's buffers, the NVIDIA driver's "
        "mappings of its device files); mmap without MAP_HUGETLB, memfd_create without MFD_HUGETLB, madvise with "
        "the advice in MADVISE_ALLOWED (argument filters below); mlock within RLIMIT_MEMLOCK",
        (
            "brk",
            "mmap",
            "munmap",
            "mremap",
            "mprotect",
            "msync",
            "madvise",
            "memfd_create",
            "membarrier",
            "mlock",
            "mlock2",
            "munlock",
            "mlockall",
            "munlockall",
        ),
    ),
    Group(
        "files",
        "every runtime: imports, the package's files, the private /tmp (safetensors and the GGUF loader map "
        "files; shutil copies with sendfile/copy_file_range); posix_fadvise with the advice in FADVISE_ALLOWED",
        (
            "read",
            "write",
            "readv",
            "writev",
            "pread64",
            "pwrite64",
            "preadv",
            "pwritev",
            "preadv2",
            "pwritev2",
            "open",
            "openat",
            "openat2",
            "creat",
            "close",
            "close_range",
            "lseek",
            "stat",
            "fstat",
            "lstat",
            "newfstatat",
            "statx",
            "statfs",
            "fstatfs",
            "access",
            "faccessat",
            "faccessat2",
            "getdents",
            "getdents64",
            "readlink",
            "readlinkat",
            "getcwd",
            "chdir",
            "fchdir",
            "mkdir",
            "mkdirat",
            "rmdir",
            "unlink",
            "unlinkat",
            "rename",
            "renameat",
            "renameat2",
            "link",
            "linkat",
            "symlink",
            "symlinkat",
            "chmod",
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "truncate",
            "ftruncate",
            "fallocate",
            "fsync",
            "fdatasync",
            "flock",
            "fcntl",
            "dup",
            "dup2",
            "dup3",
            "umask",
            "utimensat",
            "getxattr",
            "lgetxattr",
            "fgetxattr",
            "listxattr",
            "llistxattr",
            "flistxattr",
            "sendfile",
            "copy_file_range",
            "splice",
            "tee",
            "ioctl",
            "fadvise64",
        ),
    ),
    Group(
        "processes and threads",
        "every runtime: Python's threads and subprocesses, torch's and OpenMP's thread pools, llama.cpp's "
        "workers, uvicorn; clone without namespace flags (clone3 answers ENOSYS: the C library then uses clone)",
        (
            "clone",
            "fork",
            "vfork",
            "execve",
            "execveat",
            "exit",
            "exit_group",
            "wait4",
            "waitid",
            "kill",
            "tgkill",
            "tkill",
            "getpid",
            "getppid",
            "gettid",
            "getpgid",
            "setpgid",
            "getpgrp",
            "getsid",
            "setsid",
            "set_tid_address",
            "set_robust_list",
            "get_robust_list",
            "rseq",
            "arch_prctl",
            "prctl",
            "futex",
            "futex_waitv",
            "sched_yield",
            "sched_getaffinity",
            "sched_setaffinity",
            "sched_getparam",
            "sched_setparam",
            "sched_getscheduler",
            "sched_setscheduler",
            "sched_get_priority_max",
            "sched_get_priority_min",
            "sched_getattr",
            "sched_setattr",
            "sched_rr_get_interval",
            "getpriority",
            "setpriority",
            "ioprio_get",
            "ioprio_set",
            "getrlimit",
            "setrlimit",
            "prlimit64",
            "getrusage",
            "times",
            "capget",
            "getuid",
            "geteuid",
            "getgid",
            "getegid",
            "getgroups",
            "getresuid",
            "getresgid",
            "pidfd_open",
            "pidfd_send_signal",
            "personality",
            "uname",
            "sysinfo",
            "getcpu",
            "getrandom",
        ),
    ),
    Group(
        "time and signals",
        "every runtime: sleeps, timeouts, asyncio's and uvloop's timers, Python's signal handlers",
        (
            "restart_syscall",
            "pause",
            "nanosleep",
            "clock_nanosleep",
            "clock_gettime",
            "clock_getres",
            "gettimeofday",
            "time",
            "alarm",
            "getitimer",
            "setitimer",
            "timer_create",
            "timer_settime",
            "timer_gettime",
            "timer_getoverrun",
            "timer_delete",
            "timerfd_create",
            "timerfd_settime",
            "timerfd_gettime",
            "rt_sigaction",
            "rt_sigprocmask",
            "rt_sigreturn",
            "rt_sigsuspend",
            "rt_sigpending",
            "rt_sigtimedwait",
            "rt_sigqueueinfo",
            "rt_tgsigqueueinfo",
            "sigaltstack",
            "signalfd",
            "signalfd4",
        ),
    ),
    Group(
        "event loops, pipes and sockets",
        "the worker's pipes to the pipeline, asyncio and uvloop (epoll, eventfd), the relay and the servers "
        "(sockets: Unix only for a package worker; IPv4, IPv6 and routing netlink for a server)",
        (
            "pipe",
            "pipe2",
            "poll",
            "ppoll",
            "select",
            "pselect6",
            "epoll_create",
            "epoll_create1",
            "epoll_ctl",
            "epoll_wait",
            "epoll_pwait",
            "epoll_pwait2",
            "eventfd",
            "eventfd2",
            "socket",
            "socketpair",
            "bind",
            "listen",
            "accept",
            "accept4",
            "connect",
            "getsockname",
            "getpeername",
            "getsockopt",
            "setsockopt",
            "sendto",
            "recvfrom",
            "sendmsg",
            "recvmsg",
            "sendmmsg",
            "recvmmsg",
            "shutdown",
        ),
    ),
)

# Left out on purpose (every other call is refused too); what each would allow
REFUSED: dict[str, str] = {
    "memfd_secret": "secret memory: page cache of no file, not shared memory (hid a dense twin from the old meter)",
    "mincore": "which pages of a shared read-only file are resident: a channel between sandboxes",
    "cachestat": "the same, per file range",
    "readahead": "sets which pages of a shared file are resident",
    "io_uring_setup": "asynchronous reads that can ask for cached pages only (RWF_NOWAIT); kernel memory",
    "io_uring_enter": "see io_uring_setup",
    "io_uring_register": "see io_uring_setup; registered buffers",
    "io_setup": "Linux AIO: reads that can ask for cached pages only (RWF_NOWAIT)",
    "io_submit": "see io_setup",
    "process_madvise": "advice on another process's memory",
    "userfaultfd": "memory whose contents a handler supplies",
    "shmget": "SysV shared memory (charged, and nothing needs it; SHM_HUGETLB would not be)",
    "msgget": "SysV message queues (nothing needs them)",
    "semget": "SysV semaphores (nothing needs them)",
    "mq_open": "POSIX message queues (nothing needs them)",
    "add_key": "the kernel keyrings: per user, shared with the host and every sandbox, not charged",
    "request_key": "see add_key",
    "keyctl": "see add_key",
    "bpf": "BPF maps: kernel memory outside the count",
    "perf_event_open": "perf ring buffers; hardware counters",
    "unshare": "new namespaces: a user namespace of its own could mount a ramfs",
    "setns": "joining other namespaces",
    "mount": "mounts (ramfs, hugetlbfs)",
    "fsopen": "mounts, new API",
    "open_tree": "mounts, new API",
    "move_mount": "mounts, new API",
    "pivot_root": "changing the root",
    "chroot": "changing the root",
    "inotify_init1": "events of every process that reads a shared file: a channel between sandboxes",
    "fanotify_init": "see inotify_init1",
    "ptrace": "other processes' memory",
    "process_vm_readv": "other processes' memory",
    "process_vm_writev": "other processes' memory",
    "kcmp": "comparing other processes' resources",
    "pidfd_getfd": "other processes' descriptors",
    "mbind": "NUMA placement (Docker requires CAP_SYS_NICE)",
    "set_mempolicy": "NUMA placement",
    "migrate_pages": "NUMA placement",
    "move_pages": "NUMA placement",
    "remap_file_pages": "deprecated non-linear mappings",
    "vmsplice": "user pages queued in a pipe",
    "setxattr": "extended attributes on /tmp files: kernel memory",
    "fsetxattr": "see setxattr",
    "name_to_handle_at": "file handles of shared files",
    "open_by_handle_at": "see name_to_handle_at",
    "swapon": "swap",
    "syslog": "the kernel log",
}


@dataclass(frozen=True)
class Only:
    """An allowed call, only where argument ``arg`` has one of ``values``, or has the bits ``clear`` unset; and,
    with ``then``, where argument ``then[0]`` is ``then[1]`` too."""

    arg: int
    values: tuple[int, ...] = ()
    clear: int = 0
    then: tuple[int, int] | None = None


def conditions(profile: Profile) -> dict[str, list[Only]]:
    """The argument filters: a call listed here is allowed where one of its rules holds."""
    sockets = [Only(0, values=(AF_UNIX,))]
    if profile in ("server", "engine"):
        sockets += [Only(0, values=(AF_INET, AF_INET6)), Only(0, values=(AF_NETLINK,), then=(2, NETLINK_ROUTE))]
    return {
        "mmap": [Only(3, clear=MAP_HUGETLB)],
        "memfd_create": [Only(1, clear=MFD_HUGETLB)],
        "clone": [Only(0, clear=CLONE_NEW_NAMESPACES)],
        "madvise": [Only(2, values=tuple(MADVISE_ALLOWED.values()))],
        "fadvise64": [Only(3, values=tuple(FADVISE_ALLOWED.values()))],
        "preadv2": [Only(5, clear=RWF_NOWAIT)],
        "pwritev2": [Only(5, clear=RWF_NOWAIT)],
        "socket": sockets,
        "socketpair": [Only(0, values=(AF_UNIX,))],
        "personality": [Only(0, values=PERSONALITY_ALLOWED)],
    }


def allowed() -> set[str]:
    return {call for group in GROUPS for call in group.calls}


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None where the filter can be compiled here, else why not (libseccomp or its binding is missing)."""
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, RuntimeError) as exc:  # RuntimeError: the binding found no libseccomp.so
        return f"the seccomp filter cannot be built: {exc} (Debian/Ubuntu: apt-get install libseccomp2)"
    return None


@functools.lru_cache(maxsize=4)
def program(profile: Profile, default: int | None = None) -> bytes:
    """The BPF program of the allowlist for ``profile`` (``default``: the action for everything else, EPERM;
    ``pyseccomp.LOG`` to find what a runtime needs)."""
    import pyseccomp as sc

    refuse = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(refuse if default is None else default)
    f.set_attr(sc.Attr.ACT_BADARCH, refuse)
    only = conditions(profile)
    for call in sorted(allowed()):
        number = sc.resolve_syscall(sc.Arch.NATIVE, call)
        if number < 0:
            continue  # not a call of this architecture (aarch64 has no open, stat, fork...)
        if call not in only:
            f.add_rule(sc.ALLOW, number)
        for rule in only.get(call, []):
            also = [sc.Arg(rule.then[0], sc.EQ, rule.then[1])] if rule.then else []
            if rule.values:
                for value in rule.values:
                    f.add_rule(sc.ALLOW, number, sc.Arg(rule.arg, sc.EQ, value), *also)
            else:
                f.add_rule(sc.ALLOW, number, sc.Arg(rule.arg, sc.MASKED_EQ, rule.clear, 0), *also)
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def filter_fd(profile: Profile) -> int:
    """A readable fd holding :func:`program` (the caller passes it to bwrap and closes it)."""
    code = program(profile)
    fd = os.memfd_create("infbench-seccomp")
    os.write(fd, code)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def summary(profile: Profile) -> str:
    """What the sandbox record says about the filter."""
    sockets = "Unix sockets only" if profile == "worker" else "Unix, IPv4, IPv6 and routing netlink sockets"
    return (
        f"allowlist ({profile}: {len(allowed())} calls, {sockets}; everything else EPERM, "
        f"memfd_secret, hugetlb, mincore and page-cache advice among it); RLIMIT_MEMLOCK {MEMLOCK_BYTES >> 10} KiB"
    )
