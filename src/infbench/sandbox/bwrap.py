"""The bubblewrap (``bwrap``) command line for a :class:`~infbench.sandbox.policy.Policy`.

New mount, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``; the network namespace holds only
its own loopback), no capabilities, a new session (no terminal to inject into), killed with its parent, an
environment of exactly ``policy.env``, the system calls of an allowlist (:mod:`.seccomp`). Read-only binds are
mount-level read-only: writes fail with ``EROFS``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from infbench.sandbox.policy import SYSTEM_LINKS, Policy


def executable() -> str | None:
    return shutil.which("bwrap")


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None when bubblewrap can make a sandbox here, else why not (shown in records)."""
    exe = executable()
    if exe is None:
        return "bubblewrap (bwrap) is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [
        exe,
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
        *_links(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        "/usr/bin/true",
    ]
    try:
        out = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if out.returncode != 0:
        return f"bwrap cannot create namespaces here: {out.stderr.strip()[-300:]}"
    return None


@functools.lru_cache(maxsize=1)
def version() -> str:
    exe = executable()
    if exe is None:
        return ""
    out = subprocess.run([exe, "--version"], capture_output=True, text=True)
    return out.stdout.strip()


def _links() -> list[str]:
    """``/bin``, ``/lib`` ... as on the host: symbolic links into ``/usr`` stay links, directories are bound."""
    args: list[str] = []
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def argv(policy: Policy, command: list[str], *, info_fd: int | None = None, seccomp_fd: int | None = None) -> list[str]:
    args = [
        executable() or "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    for key, value in sorted(policy.env.items()):
        args += ["--setenv", key, value]
    size = ["--size", str(policy.tmp_bytes)] if policy.tmp_bytes else []
    # /dev: bubblewrap's minimal one (null, zero, random, tty, pts) with a private /dev/shm (POSIX shared memory
    # and semaphores need one) as size-capped as /tmp and metered the same way, and the GPU device nodes
    args += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/dev/shm"]
    for dev in policy.devices:
        args += ["--dev-bind", dev, dev]
    args += [*size, "--tmpfs", "/tmp"]
    # Directories made read-only once everything below them is in place: bubblewrap creates each mount point
    # in its parent, which then must still be writable (a device node bound after /dev was remounted read-only
    # failed: "Can't create file at /dev/nvidia-uvm: Read-only file system"); a remount is not recursive, so
    # what is mounted below keeps its own flags
    read_only_last = ["/dev"]
    args += _links()
    nested = {d: [p for p in policy.read_only if p != d and _under(p, d)] for d in policy.site_dirs}
    below = {p for paths in nested.values() for p in paths}
    for path in policy.read_only:
        if path not in below:
            args += ["--ro-bind", path, path]
    for target, path in policy.links:
        if not any(_under(path, d) for d in policy.site_dirs):
            args += ["--symlink", target, path]
    for directory, paths in nested.items():
        # a directory where distributions are installed: empty, then only the allowed ones bound back
        args += ["--tmpfs", directory]
        for path in paths:
            args += ["--ro-bind", path, path]
        for target, path in policy.links:
            if _under(path, directory):
                args += ["--symlink", target, path]
        read_only_last.append(directory)
    for path in policy.covered:
        args += ["--ro-bind", "/dev/null", path]  # an empty device node on a nodev mount: nothing of the file
    for inside, host in policy.mounts.items():
        args += ["--ro-bind", host, inside]
    for directory in read_only_last:
        args += ["--remount-ro", directory]
    args += ["--remount-ro", "/"]  # bubblewrap's own root (a tmpfs holding the mount points): not writable
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]  # src/infbench/sandbox/seccomp.py
    args += ["--chdir", policy.cwd, "--", *command]
    return args
