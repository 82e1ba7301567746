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

from pydantic import BaseModel, ConfigDict

from infbench.errors import InfbenchError
from infbench.sandbox import bwrap
from infbench.sandbox.policy import Policy


class SandboxSettings(BaseModel):
    """Config ``sandbox`` after schema validation (defaults live in the schema only)."""

    model_config = ConfigDict(extra="forbid")
    allow_unsandboxed: bool
    tmp_mb: int


class SandboxRecord(BaseModel):
    """How a process was isolated; written into every record built on its measurements."""

    kind: Literal["bwrap", "none"]
    reason: str = ""  # why there was no sandbox
    bwrap_version: str = ""
    read_only: list[str] = []
    hidden: list[str] = []
    writable: list[str] = []
    env_keys: list[str] = []
    network: str = ""


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
    """A running sandboxed command; use as a context manager (everything in it is killed on exit)."""

    def __init__(self, policy: Policy, command: list[str], *, allow_unsandboxed: bool, network: str,
                 stdin=None, stdout=None, stderr=None, pass_fds: tuple[int, ...] = ()):
        self.policy, self.command, self.network = policy, command, network
        self.allow_unsandboxed = allow_unsandboxed
        self._streams = dict(stdin=stdin, stdout=stdout, stderr=stderr)
        self._pass_fds = tuple(pass_fds)
        self.proc: subprocess.Popen | None = None
        self.init_pid = 0
        self._private_tmp: str | None = None
        self.record: SandboxRecord | None = None

    def __enter__(self) -> "Sandboxed":
        reason = bwrap.unavailable_reason()
        if reason is None:
            self._start_bwrap()
        elif self.allow_unsandboxed:
            self._start_plain(reason)
        else:
            raise SandboxUnavailable(f"{reason}; set sandbox.allow_unsandboxed: true to run without a sandbox "
                                     "(its verdicts are then marked unsandboxed)")
        return self

    def _start_bwrap(self) -> None:
        read, write = os.pipe()
        try:
            self.proc = subprocess.Popen(bwrap.argv(self.policy, self.command, info_fd=write), env={},
                                         pass_fds=(write, *self._pass_fds), start_new_session=True,
                                         **self._streams)
        finally:
            os.close(write)
        with os.fdopen(read, "rb") as info:
            raw = info.read()
        if not raw:
            self.proc.wait()
            raise SandboxUnavailable(f"bwrap exited ({self.proc.returncode}) before the sandbox was made")
        self.init_pid = int(json.loads(raw)["child-pid"])
        self._pid_ns = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        self.record = SandboxRecord(kind="bwrap", bwrap_version=bwrap.version(), read_only=list(self.policy.read_only),
                                    hidden=list(self.policy.hidden), writable=list(self.policy.writable),
                                    env_keys=sorted(self.policy.env), network=self.network)

    def _start_plain(self, reason: str) -> None:
        self._private_tmp = tempfile.mkdtemp(prefix="infbench-unsandboxed-")
        env = {**self.policy.env, "HOME": self._private_tmp, "TMPDIR": self._private_tmp}
        cwd = self._private_tmp if self.policy.cwd == "/tmp" else self.policy.cwd
        self.proc = subprocess.Popen(self.command, env=env, cwd=cwd, pass_fds=self._pass_fds,
                                     start_new_session=True, **self._streams)
        self.init_pid = self.proc.pid
        self.record = SandboxRecord(kind="none", reason=reason, env_keys=sorted(env),
                                    network="host (no sandbox)")

    def pids(self) -> list[int]:
        """Every process of the sandbox (host PIDs): its PID namespace, or the unsandboxed command's session."""
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
        """Host-visible paths of what the sandbox can write: its private /tmp and the writable binds."""
        tmp = f"/proc/{self.init_pid}/root/tmp" if self.record.kind == "bwrap" else self._private_tmp
        return [tmp, *self.policy.writable]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Kill everything in the sandbox: its PID namespace dies with its first process, which bwrap (waiting
        on it) then reaps; unsandboxed, every process of the command's session."""
        if self.proc is None:
            return
        if self.record and self.record.kind == "bwrap":
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init_pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        else:
            for pid in self.pids():  # children that left the process group but not the session
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def __exit__(self, *exc) -> None:
        self.kill()
        if self._private_tmp:
            shutil.rmtree(self._private_tmp, ignore_errors=True)

