"""The CPUs a sandbox may run on, enforced by the kernel, and the CPU time it used.

A server is charged for ``devices x cpus_per_device`` CPUs of its deployment; its sandbox gets exactly those (the
first of the CPUs this job may use) through a cpuset cgroup, which nothing inside can widen: ``sched_setaffinity``
is bounded by the cpuset, the cgroup files are not in the sandbox, and a pool of engines started on "every CPU"
(``os.cpu_count()`` still reports the host's) shares the allotted ones. The same cgroup counts the CPU time of
everything the sandbox ran (v1 ``cpuacct.usage``, v2 ``cpu.stat`` ``usage_usec``).

- cgroup v1: a child of this job's ``cpuset`` cgroup (``cpuset.cpus``, ``cpuset.mems`` copied from the parent)
  and of its ``cpuacct`` cgroup;
- cgroup v2: the sandbox's memory cgroup (:mod:`.cgroup`) with the ``cpuset`` and ``cpu`` controllers enabled
  below this job's cgroup (one cgroup per process in v2).

Where neither can be made the sandbox's first process is pinned with ``sched_setaffinity`` only, which a process
inside may undo; :class:`CpuAccounting` then says ``affinity`` and why, and the CPUs D divides by are all this
job could use (what the sandbox could reach), not the charged ones.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from infbench.sandbox import cgroup


class CpuAccounting(BaseModel):
    """Where a sandbox's CPUs were confined and what it used."""

    kind: Literal["cpuset v1", "cpuset v2", "affinity"]
    reason: str = ""  # why there is no cpuset
    charged: int  # CPUs its deployment is charged for
    allowed: list[int]  # CPUs the sandbox could run on (a cpuset: enforced; affinity: what it started with)
    reachable: int  # CPUs a process inside could run on: len(allowed) under a cpuset, else all the job's
    available: int  # CPUs this job could use
    cpu_time_s: float | None = None  # CPU time of everything the sandbox ran (None: not measured)

    def describe(self) -> str:
        """e.g. ``1 of 2 CPUs (cpuset)``."""
        how = "cpuset" if self.kind.startswith("cpuset") else f"affinity only: {self.reason}"
        return f"{self.reachable} of {self.available} CPUs ({how})"


# The thread-pool sizes a process reads from its environment: OpenMP's, MKL's, OpenBLAS's and the others Snakemake
# sets from a job's `threads` (its jobs inherit them).
THREAD_COUNT_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)


def thread_env(threads: int) -> dict[str, str]:
    """The environment of a process held to ``threads`` CPUs: every pool it sizes from :data:`THREAD_COUNT_VARIABLES`
    that size (a pool wider than its CPUs time-slices its threads on them: vLLM's CPU kernels with the job's
    ``MKL_NUM_THREADS=2`` on one CPU decoded 2.8 times slower)."""
    return dict.fromkeys(THREAD_COUNT_VARIABLES, str(threads))


def job_cpus() -> list[int]:
    """The CPUs this job may use."""
    return sorted(os.sched_getaffinity(0))


def allot(n: int) -> list[int]:
    """The first ``n`` of this job's CPUs (all of them where it has fewer)."""
    return job_cpus()[:n]


def _v1_dir(controller: str) -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            for root, point, fstype, opts in cgroup._mounts():
                if fstype == "cgroup" and controller in opts.split(","):
                    rel = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
                    return Path(point) / rel
    raise cgroup.CgroupUnavailable(f"cgroup v1 {controller} controller is not mounted")


def _cpulist(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


class CpuCgroup:
    """The cgroup(s) that confine a sandbox to its CPUs and count its CPU time; :func:`create` makes them."""

    def __init__(self, version: int, cpuset: Path, acct: Path, owned: list[Path], cpus: list[int]):
        self.version, self.cpuset, self.acct, self.owned, self.cpus = version, cpuset, acct, owned, cpus

    @property
    def procs(self) -> list[Path]:
        """The ``cgroup.procs`` files the sandbox's first process joins."""
        return list(dict.fromkeys([self.cpuset / "cgroup.procs", self.acct / "cgroup.procs"]))

    def cpu_time_s(self) -> float | None:
        with contextlib.suppress(OSError, ValueError):
            if self.version == 1:
                return int((self.acct / "cpuacct.usage").read_text()) / 1e9
            for line in (self.acct / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        return None

    def remove(self, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        for path in self.owned:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left for a later job's clean-up
                    time.sleep(0.05)


def _child(base: Path) -> Path:
    cgroup._remove_stale(base)
    path = base / f"{cgroup.PREFIX}{os.getpid()}-cpu-{time.monotonic_ns() % 10**12}"
    try:
        path.mkdir()
    except OSError as exc:
        raise cgroup.CgroupUnavailable(f"cannot create a cgroup under {base}: {exc.strerror}") from None
    return path


def create(cpus: list[int], memory: cgroup.MemoryCgroup | None) -> CpuCgroup:
    """Cgroup(s) confining a sandbox to ``cpus``; ``memory``: its memory cgroup (in v2 the same cgroup)."""
    if memory is not None and memory.version == 2:
        parent = memory.path.parent
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            missing = [c for c in ("cpuset", "cpu") if c not in enabled]
            if missing:
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
            (memory.path / "cpuset.cpus").write_text(_cpulist(cpus))
        except OSError as exc:
            raise cgroup.CgroupUnavailable(f"cgroup v2: no cpuset below {parent}: {exc.strerror}") from None
        return CpuCgroup(2, memory.path, memory.path, [], cpus)
    try:
        cpuset_base, acct_base = _v1_dir("cpuset"), _v1_dir("cpuacct")
    except (OSError, ValueError) as exc:
        raise cgroup.CgroupUnavailable(f"no cgroup v1 cpuset: {exc}") from None
    owned: list[Path] = []
    try:
        cpuset = _child(cpuset_base)
        owned.append(cpuset)
        mems = (cpuset_base / "cpuset.mems").read_text().strip() or "0"
        (cpuset / "cpuset.mems").write_text(mems)
        (cpuset / "cpuset.cpus").write_text(_cpulist(cpus))
        acct = cpuset if acct_base == cpuset_base else _child(acct_base)
        if acct != cpuset:
            owned.append(acct)
    except (OSError, cgroup.CgroupUnavailable) as exc:
        CpuCgroup(1, Path(), Path(), owned, cpus).remove(1.0)
        raise cgroup.CgroupUnavailable(f"cgroup v1 cpuset: {exc}") from None
    return CpuCgroup(1, cpuset, acct, owned, cpus)
