"""Memory of the processes in a sandbox, read by the parent from outside (PROTOCOL A2).

With a memory cgroup (:mod:`.cgroup`, the default wherever one can be made) the figure is everything the kernel
charges the sandbox once it has reclaimed what it can of it (:meth:`~.cgroup.MemoryCgroup.reclaim`: the page
cache of the read-only files it read, the dentries and inodes of the files it looked at), so what remains is
what it holds (:attr:`~.cgroup.CgroupMemory.charged_bytes`: anonymous memory, tmpfs and shared memory, memfds,
secret memory, kernel memory such as pipe and socket buffers and message queues, swap), plus the PSS of the
files of its read-only mounts (the package) that its processes map, read before the reclaim. Nothing is
subtracted, so nothing the sandbox holds can escape the charge: a page is charged when it is allocated, whoever
maps it later.

Without one (the record says why), the figure comes from ``/proc`` alone, as before:

- ``/proc/<pid>/smaps`` of every process in the sandbox. A mapping of a file of the read-only runtime (the
  interpreter, shared libraries, Python modules) is library code, not model storage: only its anonymous
  (copy-on-write) pages count. Every other mapping counts by its proportional set size (PSS, a page shared by
  several processes counts once): the heap and anonymous memory, files of the package (an mmapped GGUF),
  deleted or in-memory files, shared memory;
- files the sandbox wrote into its private ``/tmp`` and ``/dev/shm``;
- what ``/proc/<pid>/fd`` reaches and no path does: memfds and deleted-but-open files (their allocated
  blocks) and the bytes queued in the pipes its processes hold. SysV shared memory after ``shmdt``, SysV
  message queues and socket buffers are not seen by this fallback (a cgroup charges them).

The figure a verdict uses subtracts a baseline measured the same way from a worker that imported the same
runtime and loaded no model (:mod:`infbench.compression.storage`).

:class:`PeakSampler` samples every process's resident set (``VmRSS`` from ``/proc/<pid>/status``, cheap enough for
a 10 ms period; ``smaps`` costs several ms per process) and keeps the peak per phase (PROTOCOL A2, Table A8).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import termios
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from infbench.sandbox.cgroup import CgroupMemory, MemoryCgroup

KIB = 1024


class MemoryUse(BaseModel):
    processes: int
    pss_counted_bytes: int  # PSS of the mappings that are neither runtime files nor mounted files
    mounted_file_bytes: int = 0  # PSS of mapped files of the read-only mounts (the package)
    runtime_anon_bytes: int  # copy-on-write pages inside runtime-file mappings
    runtime_file_bytes: int  # PSS of runtime files (library code; not counted)
    written_file_bytes: int  # files in the sandbox's private /tmp and /dev/shm
    held_file_bytes: int = 0  # open memfds and deleted files (/proc/<pid>/fd), not counted above
    pipe_bytes: int = 0  # bytes queued in the pipes the sandbox holds open
    cgroup: CgroupMemory | None = None

    @property
    def proc_bytes(self) -> int:
        """The figure from /proc alone (the meter without a cgroup)."""
        return (
            self.pss_counted_bytes
            + self.mounted_file_bytes
            + self.runtime_anon_bytes
            + self.written_file_bytes
            + self.held_file_bytes
            + self.pipe_bytes
        )

    @property
    def counted_bytes(self) -> int:
        """The figure ``S_res`` is taken from: the cgroup's charge plus mapped package files, else /proc's."""
        if self.cgroup is not None:
            return self.cgroup.charged_bytes + self.mounted_file_bytes
        return self.proc_bytes


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _device(field: str) -> int:
    major, minor = field.split(":")
    return os.makedev(int(major, 16), int(minor, 16))


def _process_smaps(
    pid: int, runtime_roots: tuple[str, ...], mounted_roots: tuple[str, ...], skip: set[tuple[int, int]]
) -> tuple[int, int, int, int]:
    counted = mounted = runtime_anon = runtime_file = 0
    kind = "counted"
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header: address perms offset dev inode path
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                real = path.startswith("/") and not path.endswith("(deleted)")
                if parts[4] != "0" and (_device(parts[3]), int(parts[4])) in skip:
                    kind = "skip"  # an open memfd or deleted file, counted whole by the /proc/<pid>/fd walk
                elif real and _under(path, mounted_roots):
                    kind = "mounted"
                elif real and _under(path, runtime_roots):
                    kind = "runtime"
                else:
                    kind = "counted"
            elif first == "Pss:":
                value = int(line.split()[1]) * KIB
                if kind == "runtime":
                    runtime_file += value
                elif kind == "mounted":
                    mounted += value
                elif kind == "counted":
                    counted += value
            elif first == "Anonymous:" and kind == "runtime":
                runtime_anon += int(line.split()[1]) * KIB
    return counted, mounted, runtime_anon, runtime_file


def held_files(pids: list[int]) -> tuple[dict[tuple[int, int], int], int]:
    """Open files no path reaches (memfds, deleted files: allocated bytes by inode) and the bytes queued in
    the pipes the processes hold (each pipe once), from ``/proc/<pid>/fd``."""
    files: dict[tuple[int, int], int] = {}
    pipes: dict[str, int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            with contextlib.suppress(OSError):
                link = os.readlink(path)
                if link.startswith("pipe:"):
                    if link not in pipes:
                        pipes[link] = _queued(path)
                elif not link.startswith(("socket:", "anon_inode:")):
                    st = os.stat(path)
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 0:
                        files[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return files, sum(pipes.values())


def _queued(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), "little")
    finally:
        os.close(fd)


def written_bytes(paths: list[str]) -> int:
    """Allocated bytes of the regular files under ``paths``, each inode once, on each path's own filesystem only
    (read-only binds mounted below a sandbox's /tmp are not its writes)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root in paths:
        if not root or not os.path.isdir(root):
            continue
        device = os.stat(root).st_dev
        for directory, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if _same_device(os.path.join(directory, d), device)]
            for name in files:
                with contextlib.suppress(OSError):
                    st = os.lstat(os.path.join(directory, name))
                    if Path(directory, name).is_symlink() or (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def _same_device(path: str, device: int) -> bool:
    try:
        return os.lstat(path).st_dev == device
    except OSError:
        return False


def measure(
    pids: list[int],
    runtime_roots: list[str],
    written: list[str] = (),
    *,
    mounted_roots: list[str] = (),
    cgroup: MemoryCgroup | None = None,
) -> MemoryUse:
    """Memory of the processes ``pids``: ``runtime_roots`` hold library files, ``mounted_roots`` the package
    (paths as the processes see them), ``written`` the directories they can write (host paths). ``cgroup``: its
    reading, taken last, after the kernel has reclaimed what it can of it."""
    roots = tuple(os.path.realpath(r) for r in runtime_roots)
    mounted = tuple(mounted_roots)
    held, pipes = held_files(pids)
    counted = package = runtime_anon = runtime_file = processes = 0
    for pid in pids:
        try:
            c, m, a, f = _process_smaps(pid, roots, mounted, set(held))
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        counted, package, runtime_anon, runtime_file = counted + c, package + m, runtime_anon + a, runtime_file + f
        processes += 1
    return MemoryUse(
        processes=processes,
        pss_counted_bytes=counted,
        mounted_file_bytes=package,
        runtime_anon_bytes=runtime_anon,
        runtime_file_bytes=runtime_file,
        written_file_bytes=written_bytes(list(written)),
        held_file_bytes=sum(held.values()),
        pipe_bytes=pipes,
        cgroup=cgroup.read(reclaimed=cgroup.reclaim()) if cgroup is not None else None,
    )


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * KIB
    return 0


class PeakSampler:
    """Samples the summed resident set of a sandbox's processes every ``period_s``; peak per phase.

    ``pids`` is called again every ``refresh`` samples (processes come and go). Use as a context manager;
    :meth:`phase` names what runs now (load, prefill, decode, ...).
    """

    def __init__(self, pids: Callable[[], list[int]], period_s: float = 0.010, refresh: int = 10):
        self._pids, self.period_s, self.refresh = pids, period_s, refresh
        self.peaks: dict[str, int] = {}
        self.samples = 0
        self._phase = "start"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="infbench-peak-sampler")

    def phase(self, name: str) -> None:
        self._phase = name

    def _run(self) -> None:
        pids: list[int] = []
        while not self._stop.is_set():
            if self.samples % self.refresh == 0:
                with contextlib.suppress(OSError):
                    pids = self._pids()
            total = 0
            for pid in pids:
                with contextlib.suppress(OSError):
                    total += _rss(pid)
            phase = self._phase
            self.peaks[phase] = max(self.peaks.get(phase, 0), total)
            self.samples += 1
            self._stop.wait(self.period_s)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
