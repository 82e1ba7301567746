"""Memory of the processes in a sandbox, read by the parent from ``/proc`` (PROTOCOL A2).

:func:`measure` parses ``/proc/<pid>/smaps`` of every process in the sandbox. Each mapping is one of:

- *runtime*: a file under the read-only runtime roots (the interpreter, shared libraries, Python modules):
  library code, not model storage; only its anonymous (copy-on-write) pages count, since a private writable
  mapping of a library file can hold anything;
- *counted*: everything else, by its proportional set size (PSS, so a page shared by several processes counts
  once): the heap and anonymous memory, files of the package (an mmapped GGUF), deleted or in-memory files,
  shared memory.

Files the sandbox wrote into its private ``/tmp`` or its writable directories are counted too: bytes kept in a
tmpfs file are memory no process maps. The figure a verdict uses subtracts a baseline measured the same way from a
worker that imported the same runtime and loaded no model (:mod:`infbench.compression.storage`).

:class:`PeakSampler` samples every process's resident set (``VmRSS`` from ``/proc/<pid>/status``, cheap enough for
a 10 ms period; ``smaps`` costs several ms per process) and keeps the peak per phase (PROTOCOL A2, Table A8).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

KIB = 1024


class MemoryUse(BaseModel):
    processes: int
    pss_counted_bytes: int      # PSS of every mapping that is not a runtime file
    runtime_anon_bytes: int     # copy-on-write pages inside runtime-file mappings
    runtime_file_bytes: int     # PSS of runtime files (library code; not counted)
    written_file_bytes: int     # files in the sandbox's private /tmp and writable directories

    @property
    def counted_bytes(self) -> int:
        return self.pss_counted_bytes + self.runtime_anon_bytes + self.written_file_bytes


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def _process_smaps(pid: int, runtime_roots: tuple[str, ...]) -> tuple[int, int, int]:
    counted = runtime_anon = runtime_file = 0
    runtime = False
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header: address perms offset dev inode path
                parts = line.split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                runtime = path.startswith("/") and not path.endswith("(deleted)") and _under(path, runtime_roots)
            elif first == "Pss:":
                value = int(line.split()[1]) * KIB
                if runtime:
                    runtime_file += value
                else:
                    counted += value
            elif first == "Anonymous:" and runtime:
                runtime_anon += int(line.split()[1]) * KIB
    return counted, runtime_anon, runtime_file


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


def measure(pids: list[int], runtime_roots: list[str], written: list[str] = ()) -> MemoryUse:
    roots = tuple(os.path.realpath(r) for r in runtime_roots)
    counted = runtime_anon = runtime_file = processes = 0
    for pid in pids:
        try:
            c, a, f = _process_smaps(pid, roots)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited meanwhile
        counted, runtime_anon, runtime_file, processes = counted + c, runtime_anon + a, runtime_file + f, processes + 1
    return MemoryUse(processes=processes, pss_counted_bytes=counted, runtime_anon_bytes=runtime_anon,
                     runtime_file_bytes=runtime_file, written_file_bytes=written_bytes(list(written)))


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

    def __enter__(self) -> "PeakSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
