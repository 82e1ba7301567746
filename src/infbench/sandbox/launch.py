"""Start a command under a :class:`~infbench.sandbox.policy.Policy`.

Where bubblewrap works, the command runs in its own namespaces (:mod:`.bwrap`). Where it does not, the command
runs only if the config allows unsandboxed runs (``sandbox.allow_unsandboxed``), with the same environment and a
private temporary directory but no isolation; its :class:`SandboxRecord` then says ``none`` and why, and the
verdicts built on it are not ``verified`` unless that config key allows it (the tables mark such rows).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from typing import Literal

from pydantic import BaseModel

from infbench.errors import InfbenchError
from infbench.sandbox import bwrap, cgroup, cpus, seccomp
from infbench.sandbox.cpus import CpuAccounting
from infbench.sandbox.output import LogCopier
from infbench.sandbox.policy import Policy


class MemoryAccounting(BaseModel):
    """Where a sandbox's memory was measured: its own cgroup, or ``/proc`` only (and why)."""

    kind: Literal["cgroup v1", "cgroup v2", "proc"]
    reason: str = ""  # why there is no cgroup
    limit_bytes: int | None = None  # the hard limit of the cgroup, if one was set
    oom_kills: int = 0  # processes the kernel killed at the limit


class SandboxRecord(BaseModel):
    """How a process was isolated; written into every record built on its measurements."""

    kind: Literal["bwrap", "none"]
    reason: str = ""  # why there was no sandbox
    bwrap_version: str = ""
    distributions: list[str] = []  # the runtime's distributions ("name==version")
    read_only: list[str] = []
    hidden: list[str] = []  # runtime files left out (weight-like, or of distributions outside)
    mounts: dict[str, str] = {}  # inside path -> host path
    env_keys: list[str] = []
    network: str = ""
    seccomp: str = ""
    memory: MemoryAccounting | None = None
    cpus: CpuAccounting | None = None  # None: not confined to CPUs (only servers are)
    devices: list[str] = []  # device nodes bound in (GPUs: the allotted ones and the driver's control nodes)


def isolation(record: SandboxRecord | None) -> str:
    """How a table row's measurements were isolated: ``bubblewrap 0.8.0`` (what ``bwrap --version`` says),
    ``UNSANDBOXED (<why>)`` or ``not started``."""
    if record is None:
        return "not started"
    if record.kind == "none":
        return f"UNSANDBOXED ({record.reason})" if record.reason else "UNSANDBOXED"
    return record.bwrap_version or "bubblewrap"


def marked(verdict: str, record: SandboxRecord | None) -> str:
    """A verdict reached without a sandbox says so in the verdict itself."""
    return f"{verdict} (unsandboxed)" if record is not None and record.kind == "none" else verdict


class SandboxUnavailable(InfbenchError):
    """No sandbox can be made here and the config does not allow unsandboxed runs."""


class Sandboxed:
    """A running sandboxed command; use as a context manager (everything in it is killed on exit).

    ``stdout``/``stderr`` may be ``subprocess`` constants or an open binary file (a log): the sandbox then
    writes into a pipe the parent copies into it (:mod:`.output`). ``memory_limit_bytes``: the hard limit of
    the sandbox's memory cgroup (:mod:`.cgroup`; none where no cgroup can be made, which the record says).
    ``charged_cpus``: the CPUs it is charged for; it then runs on the first that many of the job's CPUs only
    (:mod:`.cpus`), and its record says which and the CPU time it used.
    """

    def __init__(
        self,
        policy: Policy,
        command: list[str],
        *,
        allow_unsandboxed: bool,
        network: str,
        stdin=None,
        stdout=None,
        stderr=None,
        pass_fds: tuple[int, ...] = (),
        memory_limit_bytes: int | None = None,
        charged_cpus: int | None = None,
    ):
        self.policy, self.command, self.network = policy, command, network
        self.allow_unsandboxed = allow_unsandboxed
        self._streams = dict(stdin=stdin, stdout=stdout, stderr=stderr)
        self._pass_fds = tuple(pass_fds)
        self.memory_limit_bytes = memory_limit_bytes
        self.charged_cpus = charged_cpus
        self.cpu_cgroup: cpus.CpuCgroup | None = None
        self.cpu_accounting: CpuAccounting | None = None
        self.proc: subprocess.Popen | None = None
        self.init_pid = 0
        self._private_tmp: str | None = None
        self.record: SandboxRecord | None = None
        self.cgroup: cgroup.MemoryCgroup | None = None
        self.copiers: list[LogCopier] = []

    def __enter__(self) -> Sandboxed:
        reason = bwrap.unavailable_reason() or seccomp.unavailable_reason()
        if reason is not None and not self.allow_unsandboxed:
            raise SandboxUnavailable(
                f"{reason}; set sandbox.allow_unsandboxed: true to run without a sandbox "
                "(its verdicts are then marked unsandboxed)"
            )
        accounting = self._make_cgroup()
        try:
            self._confine_cpus()
            if reason is None:
                self._start_bwrap()
            else:
                self._start_plain(reason)
        except BaseException:
            self._remove_cgroup()
            raise
        self.record.memory = accounting
        self.record.cpus = self.cpu_accounting
        return self

    def limit_memory(self, nbytes: int) -> None:
        """Set (or lower) the cgroup's hard limit now, while the sandbox runs; nothing where there is no
        cgroup (the record says ``memory: proc``)."""
        self.memory_limit_bytes = nbytes
        if self.cgroup is not None:
            self.cgroup.set_limit(nbytes)
            self.record.memory.limit_bytes = nbytes

    def _make_cgroup(self) -> MemoryAccounting:
        try:
            self.cgroup = cgroup.create()
        except (cgroup.CgroupUnavailable, OSError) as exc:
            return MemoryAccounting(kind="proc", reason=str(exc))
        if self.memory_limit_bytes is not None:
            self.cgroup.set_limit(self.memory_limit_bytes)
        return MemoryAccounting(kind=f"cgroup v{self.cgroup.version}", limit_bytes=self.memory_limit_bytes)

    def _confine_cpus(self) -> None:
        """The CPU cgroup of a sandbox charged for CPUs (:mod:`.cpus`), or affinity only where none can be made."""
        if self.charged_cpus is None:
            return
        allowed, available = cpus.allot(self.charged_cpus), len(cpus.job_cpus())
        try:
            self.cpu_cgroup = cpus.create(allowed, self.cgroup)
        except (cgroup.CgroupUnavailable, OSError) as exc:
            self.cpu_accounting = CpuAccounting(
                kind="affinity",
                reason=str(exc),
                charged=self.charged_cpus,
                allowed=allowed,
                reachable=available,
                available=available,
            )
            return
        self.cpu_accounting = CpuAccounting(
            kind=f"cpuset v{self.cpu_cgroup.version}",
            charged=self.charged_cpus,
            allowed=allowed,
            reachable=len(allowed),
            available=available,
        )

    def _wrapped(self, command: list[str]) -> list[str]:
        """``command`` run by a shell that first lowers ``RLIMIT_MEMLOCK`` to :data:`.seccomp.MEMLOCK_BYTES` (soft
        and hard: nothing inside can raise it) and moves itself into the sandbox's cgroups (all it starts
        follows)."""
        memlock = f"ulimit -l {seccomp.MEMLOCK_BYTES >> 10}"
        procs = [str(self.cgroup.procs)] if self.cgroup is not None else []
        if self.cpu_cgroup is not None:
            procs += [str(p) for p in self.cpu_cgroup.procs if str(p) not in procs]
        joins = "".join(f'echo $$ > "${i + 1}" && ' for i in range(len(procs)))
        shift = f"shift {len(procs)} && " if procs else ""
        return ["/bin/sh", "-c", f'{memlock} && {joins}{shift}exec "$@"', "sh", *procs, *command]

    def _preexec(self) -> None:
        """In the child before the shell runs: pinned to its CPUs (within a cpuset already; else the only bound)."""
        if self.cpu_accounting is not None:
            os.sched_setaffinity(0, self.cpu_accounting.allowed)

    def _popen(self, command: list[str], **kwargs) -> subprocess.Popen:
        """Start ``command``; a log file given as stdout or stderr becomes a pipe the parent copies into it."""
        streams, pipes = {"stdin": self._streams["stdin"]}, []
        for key in ("stdout", "stderr"):
            stream = self._streams[key]
            if stream is None or isinstance(stream, int):
                streams[key] = stream
            else:
                read, write = os.pipe()
                pipes.append((read, write, stream))
                streams[key] = write
        try:
            proc = subprocess.Popen(
                self._wrapped(command),
                start_new_session=True,
                preexec_fn=self._preexec if self.cpu_accounting is not None else None,
                **streams,
                **kwargs,
            )
        except BaseException:
            for read, _, _ in pipes:
                os.close(read)
            raise
        finally:
            for _, write, _ in pipes:
                os.close(write)
        self.copiers = [LogCopier(read, log) for read, _, log in pipes]
        return proc

    def _start_bwrap(self) -> None:
        read, write = os.pipe()
        rules = seccomp.filter_fd(self.policy.seccomp)
        try:
            self.proc = self._popen(
                bwrap.argv(self.policy, self.command, info_fd=write, seccomp_fd=rules),
                env={},
                pass_fds=(write, rules, *self._pass_fds),
            )
        finally:
            os.close(write)
            os.close(rules)
        with os.fdopen(read, "rb") as info:
            raw = info.read()
        if not raw:
            self.proc.wait()
            raise SandboxUnavailable(
                f"bwrap exited ({self.proc.returncode}) before the sandbox was made: {self.output_tail()}"
            )
        self.init_pid = int(json.loads(raw)["child-pid"])
        self._pid_ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        self.record = SandboxRecord(
            kind="bwrap",
            bwrap_version=bwrap.version(),
            distributions=list(self.policy.distributions),
            read_only=list(self.policy.read_only),
            hidden=sorted(self.policy.hidden),
            mounts=dict(self.policy.mounts),
            env_keys=sorted(self.policy.env),
            network=self.network,
            seccomp=seccomp.summary(self.policy.seccomp),
            devices=list(self.policy.devices),
        )

    def _start_plain(self, reason: str) -> None:
        self._private_tmp = tempfile.mkdtemp(prefix="infbench-unsandboxed-")
        env = {**self.policy.env, "HOME": self._private_tmp, "TMPDIR": self._private_tmp}
        cwd = self._private_tmp if self.policy.cwd == "/tmp" else self.policy.cwd
        self.proc = self._popen(self.command, env=env, cwd=cwd, pass_fds=self._pass_fds)
        self.init_pid = self.proc.pid
        self.record = SandboxRecord(
            kind="none",
            reason=reason,
            distributions=list(self.policy.distributions),
            mounts=dict(self.policy.mounts),
            env_keys=sorted(env),
            network="host (no sandbox)",
        )

    def output_tail(self, n: int = 2000) -> str:
        """The last bytes the sandbox wrote to the streams the parent copies."""
        for copier in self.copiers:
            copier.join(0.2)
        return "".join(c.tail(n) for c in self.copiers)[-n:]

    def pids(self) -> list[int]:
        """Every process of the sandbox (host PIDs): its cgroup's, else its PID namespace's, or unsandboxed the
        command's session."""
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                return sorted(int(p) for p in self.cgroup.procs.read_text().split())
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError):
                if self.record.kind == "bwrap":
                    if os.readlink(f"/proc/{entry}/ns/pid") == self._pid_ns:
                        found.append(int(entry))
                elif os.getsid(int(entry)) == self.init_pid:
                    found.append(int(entry))
        return sorted(found)

    def writable_dirs(self) -> list[str]:
        """Host-visible paths of what the sandbox can write: its private /tmp and /dev/shm."""
        if self.record.kind == "bwrap":
            root = f"/proc/{self.init_pid}/root"
            return [f"{root}/tmp", f"{root}/dev/shm"]
        return [self._private_tmp]

    def mounted_dirs(self) -> list[str]:
        """The read-only mounts (the package) as the sandbox's processes see them."""
        return [self.policy.path(inside) for inside in self.policy.mounts]

    def oom_kills(self) -> int:
        return self.cgroup.oom_kills() if self.cgroup is not None else 0

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Kill everything in the sandbox: its PID namespace dies with its first process, which bwrap (waiting
        on it) then reaps; unsandboxed, every process of the command's session (or its cgroup)."""
        if self.proc is None:
            return
        if self.record and self.record.kind == "bwrap":
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        for pid in self.pids():  # children that left the process group but not the session or the cgroup
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def cpu_time_s(self) -> float | None:
        """CPU time everything in the sandbox has used so far (None: not measured here)."""
        return self.cpu_cgroup.cpu_time_s() if self.cpu_cgroup is not None else None

    def _remove_cgroup(self) -> None:
        if self.cpu_cgroup is not None:
            self.cpu_cgroup.remove()
        if self.cgroup is not None:
            self.cgroup.remove()

    def __exit__(self, *exc) -> None:
        self.kill()
        if self.record is not None and self.record.memory is not None:
            self.record.memory.oom_kills = self.oom_kills()
        if self.record is not None and self.record.cpus is not None:
            self.record.cpus.cpu_time_s = self.cpu_time_s()
        self._remove_cgroup()
        for copier in self.copiers:
            copier.join()
        if self._private_tmp:
            shutil.rmtree(self._private_tmp, ignore_errors=True)
