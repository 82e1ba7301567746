"""A memory cgroup per sandbox, under the job's own cgroup: what the kernel charges it, and a hard limit.

Every page the kernel charges to a process's memory cgroup counts, whoever maps it and whatever holds it:
anonymous memory, tmpfs and shared memory (``/tmp`` files, memfds, deleted-but-open files, SysV segments after
``shmdt``), kernel memory (pipe buffers, socket buffers, SysV message queues, page tables) and swap. The
sandbox's first process joins its cgroup before ``bwrap`` runs (a shell writes its own PID into
``cgroup.procs`` and then execs the command), so everything the sandbox ever starts is charged there.

Before each reading the kernel is asked to reclaim the cgroup (:meth:`MemoryCgroup.reclaim`: v1
``memory.force_empty``, v2 ``memory.reclaim``). Memory-cgroup reclaim scans only the pages and kernel objects
charged to this cgroup and frees only what it can drop without losing anything: clean page cache (the only
files a sandbox can read from disk are those bound into it read-only: the runtime, the system libraries, the
package), the dentry and inode caches of the files it looked at, pages given back with ``MADV_FREE``. What it
cannot drop is held: anonymous memory, tmpfs and shared memory (it does not swap them: ``memory.swappiness`` 0
on v1, ``memory.swap.max`` 0 on v2), memfds, secret memory, ``ramfs``, mlocked pages, pipe and socket buffers,
message queues, page tables.
The charge is then everything the cgroup holds (:attr:`CgroupMemory.charged_bytes`, usage plus swap): nothing is
subtracted, so nothing can be hidden in what would be. Package files a sandboxed process maps are counted by the
meter from its ``smaps`` (:mod:`.meter`), read before the reclaim (their pages are usually the pipeline's, which
copied the package).

Both cgroup versions are supported and found from ``/proc/self/cgroup`` and ``/proc/self/mountinfo``:

- v1 (a ``memory`` hierarchy): ``memory.usage_in_bytes`` (kernel memory included), ``memory.stat`` (``cache``,
  ``shmem``, ``rss``, ``swap``), ``memory.kmem.usage_in_bytes``; reclaim through ``memory.force_empty``; the
  limit in ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is accounted); OOM kills in
  ``memory.oom_control``;
- v2 (the unified hierarchy with the memory controller delegated): ``memory.current``, ``memory.stat``
  (``anon``, ``file``, ``shmem``, ``kernel``, ``sock``), ``memory.swap.current``; reclaim through
  ``memory.reclaim`` (Linux 5.19 and later; without it nothing is reclaimed and the page cache the sandbox
  read stays in its charge); ``memory.max`` with ``memory.swap.max`` 0 and ``memory.oom.group`` 1; OOM kills in
  ``memory.events``.

Where neither can be made (no write access, a v2 cgroup whose memory controller is not delegated below it),
:func:`create` raises :class:`CgroupUnavailable` with the reason; the meter then falls back to ``/proc``.
"""

from __future__ import annotations

import contextlib
import errno
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
    reclaimed_bytes: int | None = None  # what the reclaim before this reading freed (None: no reclaim here)

    @property
    def charged_bytes(self) -> int:
        """What the sandbox holds: everything charged once the kernel has reclaimed what it can."""
        return self.usage_bytes + self.swap_bytes


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

    def _usage(self) -> int:
        return _read_int(self.path / ("memory.usage_in_bytes" if self.version == 1 else "memory.current"))

    def reclaim(self, quiet_s: float = 0.5, kernel_quiet_s: float = 3.0, limit_s: float = 10.0) -> int | None:
        """Ask the kernel to free what it can of this cgroup's memory (clean page cache, reclaimable kernel
        objects, lazily freed pages), again every 0.1 s until the charge has not fallen for ``quiet_s``, or for
        ``kernel_quiet_s`` once it has freed more than 1 MiB of kernel memory (the rest may follow): dentries
        and inodes are freed level by level after RCU grace periods (a directory's only once its entries are,
        an inode's only once its pages are), with pauses of 1-2 s between levels on cgroup v1 (measured: a walk
        over 47,000 files left 30 MB for 1.3 s, then 1.9 MB for 2 s, then 0.4 MB). The bytes freed, or None
        where this kernel has no way to ask."""
        start = time.monotonic()
        before = lowest = self._usage()
        kernel_before = self._kernel_bytes()
        fell = start
        while True:
            try:
                if self.version == 1:
                    (self.path / "memory.force_empty").write_text("0")
                else:
                    (self.path / "memory.reclaim").write_text(str(max(lowest, 1)))
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno != errno.EAGAIN:  # v2: could not free all it was asked to, as expected
                    raise
            time.sleep(0.1)
            now, usage = time.monotonic(), self._usage()
            if usage < lowest - (64 << 10):
                fell = now
            lowest = min(lowest, usage)
            quiet = kernel_quiet_s if kernel_before - self._kernel_bytes() > 1 << 20 else quiet_s
            if now - fell >= quiet or now - start >= limit_s:
                return max(0, before - usage)

    def _kernel_bytes(self) -> int:
        if self.version == 1:
            return _read_int(self.path / "memory.kmem.usage_in_bytes")
        return _stat(self.path).get("kernel", 0)

    def read(self, *, reclaimed: int | None = None) -> CgroupMemory:
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
                reclaimed_bytes=reclaimed,
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
            reclaimed_bytes=reclaimed,
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
    # the reclaim before each reading drops page cache, and must not swap anonymous or shared memory out
    name, value = ("memory.swappiness", "0") if version == 1 else ("memory.swap.max", "0")
    with contextlib.suppress(OSError):
        (path / name).write_text(value)
    return MemoryCgroup(path, version)


def unavailable_reason() -> str | None:
    try:
        parent()
    except (CgroupUnavailable, OSError) as exc:
        return str(exc)
    return None
