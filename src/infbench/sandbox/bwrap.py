"""The bubblewrap (``bwrap``) command line for a :class:`~infbench.sandbox.policy.Policy`.

New mount, PID, network, IPC, UTS and cgroup namespaces (``--unshare-all``; the network namespace holds only
its own loopback), no capabilities, a new session (no terminal to inject into), killed with its parent, an
environment of exactly ``policy.env``. Read-only binds are mount-level read-only: writes fail with ``EROFS``.
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
    probe = [exe, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
             *_links(), "--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"]
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


def argv(policy: Policy, command: list[str], *, info_fd: int | None = None) -> list[str]:
    args = [executable() or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv"]
    for key, value in sorted(policy.env.items()):
        args += ["--setenv", key, value]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if policy.tmp_bytes:
        args += ["--size", str(policy.tmp_bytes)]
    args += ["--tmpfs", "/tmp"]
    args += _links()
    for path in policy.read_only:
        args += ["--ro-bind", path, path]
    for path in policy.writable:
        args += ["--bind", path, path]
    for path in policy.hidden:
        # a hidden file becomes /dev/null on a nodev mount (unreadable), a hidden directory an empty one
        args += ["--ro-bind", "/dev/null", path] if not os.path.isdir(path) else ["--tmpfs", path,
                                                                                  "--remount-ro", path]
    for dev in policy.devices:
        args += ["--dev-bind", dev, dev]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    args += ["--chdir", policy.cwd, "--", *command]
    return args
