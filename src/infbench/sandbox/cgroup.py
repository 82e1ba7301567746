"""A memory cgroup per sandbox, under the job's own cgroup: what the kernel charges it, and a hard limit.

Every page the kernel charges to a process's memory cgroup counts, whoever maps it and whatever holds it:
anonymous memory, tmpfs and shared memory (``/tmp`` files, memfds, deleted-but-open files, SysV segments after
``shmdt``), kernel memory (pipe buffers, socket buffers, SysV message queues, page tables) and swap. The
sandbox's first process joins its cgroup before ``bwrap`` runs (a shell writes its own PID into
``cgroup.procs`` and then execs the command), so everything the sandbox ever starts is charged there.

Page cache of files read from disk (the runtime's libraries, the package's files) is charged to whichever cgroup
read a page first, is dropped by the kernel under pressure and is not held by anyone; it is left out of
:attr:`CgroupMemory.charged_bytes`. Package files a sandboxed process maps are counted by the meter from its
``smaps`` (:mod:`.meter`), as before.

Both cgroup versions are supported and found from ``/proc/self/cgroup`` and ``/proc/self/mountinfo``:

- v1 (a ``memory`` hierarchy): ``memory.usage_in_bytes`` (kernel memory included), ``memory.stat`` (``cache``,
  ``shmem``, ``rss``, ``swap``), ``memory.kmem.usage_in_bytes``; the limit in ``memory.limit_in_bytes`` (and
  ``memory.memsw.limit_in_bytes`` where swap is accounted); OOM kills in ``memory.oom_control``;
- v2 (the unified hierarchy with the memory controller delegated): ``memory.current``, ``memory.stat``
  (``anon``, ``file``, ``shmem``, ``kernel``, ``sock``), ``memory.swap.current``; ``memory.max`` with
  ``memory.swap.max`` 0 and ``memory.oom.group`` 1; OOM kills in ``memory.events``.

Where neither can be made (no write access, a v2 cgroup whose memory controller is not delegated below it),
:func:`create` raises :class:`CgroupUnavailable` with the reason; the meter then falls back to ``/proc``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import time
from pathlib import Path

from pydantic import BaseModel

from infbench.errors import InfbenchError

PREFIX = "infbench-sandbox-"
_serial = itertools.count()


class CgroupUnavailable(InfbenchError):
    pass


class CgroupMemory(BaseModel):
    """One reading of a sandbox's memory cgroup."""

    version: int
    usage_bytes: int  # everything charged (v1 usage_in_bytes, v2 memory.current)
    file_bytes: int  # page cache, shared memory included
    shmem_bytes: int  # tmpfs, memfds, SysV and POSIX shared memory
    anon_bytes: int
    kernel_bytes: int | None  # v1 kmem usage; v2 "kernel" (None where the kernel does not report it)
    sock_bytes: int | None  # v2 only (v1 charges socket buffers as kernel memory)
    swap_bytes: int

    @property
    def charged_bytes(self) -> int:
        """What the sandbox holds: everything charged but disk-backed page cache."""
        return self.usage_bytes - (self.file_bytes - self.shmem_bytes) + self.swap_bytes


def _mounts() -> list[tuple[str, str, str, str]]:
    """(root, mount point, fs type, super options) of every mount this process sees."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fields, rest = left.split(), right.split()
            found.append((fields[3], fields[4], rest[0], rest[2] if len(rest) > 2 else ""))
    return found


def _own_cgroup_dir() -> tuple[int, Path]:
    """This process's memory cgroup directory and its version (1 or 2)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    v1 = {c: p for _, cs, p in (ln.split(":", 2) for ln in lines) for c in cs.split(",") if c}
    mounts = _mounts()
    if "memory" in v1:
        for root, point, fstype, opts in mounts:
            if fstype == "cgroup" and "memory" in opts.split(","):
                rel = os.path.relpath(v1["memory"], root) if root != "/" else v1["memory"].lstrip("/")
                return 1, Path(point) / rel
        raise CgroupUnavailable("cgroup v1 memory controller is not mounted")
    unified = next((p for _, cs, p in (ln.split(":", 2) for ln in lines) if cs == ""), None)
    for root, point, fstype, _ in mounts:
        if fstype == "cgroup2" and unified is not None:
            rel = os.path.relpath(unified, root) if root != "/" else unified.lstrip("/")
            return 2, Path(point) / rel
    raise CgroupUnavailable("no memory cgroup (neither a v1 memory hierarchy nor cgroup v2) is mounted")


@functools.lru_cache(maxsize=1)
def parent() -> tuple[int, Path]:
    """Where sandbox cgroups are made: this job's own memory cgroup (checked once per process)."""
    version, path = _own_cgroup_dir()
    if not os.access(path, os.W_OK):
        raise CgroupUnavailable(f"no write access to this job's cgroup {path}")
    if version == 2:
        controllers = (path / "cgroup.controllers").read_text().split()
        if "memory" not in controllers:
            raise CgroupUnavailable(f"cgroup v2: the memory controller is not enabled for {path}")
        if "memory" not in (path / "cgroup.subtree_control").read_text().split():
            try:
                (path / "cgroup.subtree_control").write_text("+memory")
            except OSError as exc:
                raise CgroupUnavailable(
                    f"cgroup v2: the memory controller is not delegated below {path} "
                    f"({exc.strerror}: the cgroup holds processes)"
                ) from None
    _remove_stale(path)
    return version, path


def _remove_stale(path: Path) -> None:
    """Sandbox cgroups left by jobs that were killed (their creator's PID is gone) are removed."""
    for child in path.glob(f"{PREFIX}*"):
        pid = child.name[len(PREFIX) :].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(OSError):
                child.rmdir()


def _stat(path: Path) -> dict[str, int]:
    out = {}
    for line in (path / "memory.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def _read_int(path: Path, default: int = 0) -> int:
    try:
        text = path.read_text().strip()
    except OSError:
        return default
    return int(text) if text.isdigit() else default


class MemoryCgroup:
    """A sandbox's memory cgroup; :func:`create` makes one, :meth:`remove` deletes it."""

    def __init__(self, path: Path, version: int):
        self.path, self.version = path, version
        self.limit_bytes: int | None = None

    @property
    def procs(self) -> Path:
        return self.path / "cgroup.procs"

    def set_limit(self, nbytes: int) -> None:
        """A hard limit: beyond it the kernel reclaims page cache, then kills a process of the sandbox."""
        self.limit_bytes = int(nbytes)
        if self.version == 1:
            (self.path / "memory.limit_in_bytes").write_text(str(self.limit_bytes))
            if (self.path / "memory.memsw.limit_in_bytes").exists():
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(self.limit_bytes))
        else:
            (self.path / "memory.max").write_text(str(self.limit_bytes))
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if (self.path / name).exists():
                    (self.path / name).write_text(value)

    def read(self) -> CgroupMemory:
        stat = _stat(self.path)
        if self.version == 1:
            return CgroupMemory(
                version=1,
                usage_bytes=_read_int(self.path / "memory.usage_in_bytes"),
                file_bytes=stat.get("cache", 0),
                shmem_bytes=stat.get("shmem", 0),
                anon_bytes=stat.get("rss", 0),
                kernel_bytes=_read_int(self.path / "memory.kmem.usage_in_bytes"),
                sock_bytes=None,
                swap_bytes=stat.get("swap", 0),
            )
        return CgroupMemory(
            version=2,
            usage_bytes=_read_int(self.path / "memory.current"),
            file_bytes=stat.get("file", 0),
            shmem_bytes=stat.get("shmem", 0),
            anon_bytes=stat.get("anon", 0),
            kernel_bytes=stat.get("kernel"),
            sock_bytes=stat.get("sock", 0),
            swap_bytes=_read_int(self.path / "memory.swap.current"),
        )

    def oom_kills(self) -> int:
        """Processes the kernel killed because the sandbox reached its limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return 0

    def peak_bytes(self) -> int | None:
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        value = _read_int(self.path / name, -1)
        return value if value >= 0 else None

    def remove(self, timeout_s: float = 10.0) -> None:
        """Delete the cgroup once its processes are gone (they are killed with the sandbox)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # left for _remove_stale of a later job
                time.sleep(0.05)


def create() -> MemoryCgroup:
    """A fresh memory cgroup under this job's; :class:`CgroupUnavailable` says why there is none."""
    version, base = parent()
    path = base / f"{PREFIX}{os.getpid()}-{next(_serial)}-{time.monotonic_ns() % 10**9}"
    try:
        path.mkdir()
    except OSError as exc:
        raise CgroupUnavailable(f"cannot create a cgroup under {base}: {exc.strerror}") from None
    return MemoryCgroup(path, version)


def unavailable_reason() -> str | None:
    try:
        parent()
    except (CgroupUnavailable, OSError) as exc:
        return str(exc)
    return None
