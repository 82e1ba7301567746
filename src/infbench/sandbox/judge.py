"""Judge untrusted code (model output) by a trusted test, each in its own sandbox: :func:`run_case`.

A :class:`Case` is a candidate ``program`` (e.g. a HumanEval prompt and the completion a model wrote) that
must define ``entry_point``, and a trusted ``test`` defining ``check(candidate)`` with its ``helpers`` (the
problem's own prompt: imports and helper functions, never the completion). Two processes, each under
bubblewrap with a standard-library-only runtime (:mod:`.stdlib_runtime`: own PID, network, IPC and mount
namespaces, no view of the workspace or results, a private size-capped ``/tmp``, killed as a namespace):

- the *candidate* runs ``program`` and serves ``entry_point`` over a pair of pipes;
- the *checker* runs ``helpers`` and ``test`` and calls ``check`` with a proxy of the candidate's function;
  arguments and answers cross as Python literals (``repr`` and :func:`ast.literal_eval`), so an answer is a
  value, never an object of the candidate's making (an ``__eq__`` that is always true cannot cross).

The verdict is read only from a pipe that only the checker holds: ``passed`` iff ``check`` returned and every
call got a well-formed answer. The candidate's exit status, output and files are never looked at. Both
processes get resource limits from a standard-library launcher inside (:mod:`.judge_harness`: address
space, CPU seconds, file size, open files) and a wall clock here; when the verdict arrives or the clock runs
out, both sandboxes are killed with everything they started.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from infbench.config.model import SandboxSettings
from infbench.sandbox import judge_harness, stdlib_runtime
from infbench.sandbox.launch import Sandboxed, SandboxRecord

FILE_BYTES = 16 << 20  # largest file a judged process may write (RLIMIT_FSIZE); also its /tmp's size
OPEN_FILES = 64
VERDICT_BYTES = 1 << 16
NETWORK = "none (own network namespace, loopback only)"
HARNESS = Path(judge_harness.__file__).read_text()


class Case(BaseModel):
    model_config = ConfigDict(frozen=True)
    program: str  # untrusted: defines entry_point
    entry_point: str
    helpers: str  # trusted code run before the test (a HumanEval prompt)
    test: str  # trusted: defines check(candidate)


class Outcome(BaseModel):
    status: Literal["passed", "failed", "timed_out"]
    reason: str = ""  # why it failed, in the checker's words ("AssertionError", "the candidate exited ...")
    calls: int = 0  # calls of the candidate the checker made
    wall_s: float = 0.0
    sandbox: SandboxRecord | None = None  # how the candidate was isolated

    @property
    def detail(self) -> str:
        return self.status + (f": {self.reason}" if self.reason else "")


def _limits(timeout_s: float, memory_mb: int) -> dict[str, int]:
    return {
        "memory_bytes": memory_mb << 20,
        "cpu_s": math.ceil(timeout_s) + 1,
        "file_bytes": FILE_BYTES,
        "open_files": OPEN_FILES,
    }


def _command(role: str, fds: tuple[int, ...]) -> list[str]:
    return [stdlib_runtime.runtime().interpreter, "-I", "-S", "-c", HARNESS, role, *map(str, fds)]


def _start(
    stack: contextlib.ExitStack, role: str, fds: tuple[int, ...], job: dict, sandbox: SandboxSettings
) -> Sandboxed:
    box = stack.enter_context(
        Sandboxed(
            stdlib_runtime.policy(tmp_bytes=FILE_BYTES),
            _command(role, fds),
            allow_unsandboxed=sandbox.allow_unsandboxed,
            network=NETWORK,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=fds,
        )
    )
    with contextlib.suppress(OSError):  # a harness that died at once: no verdict comes, which says so
        box.proc.stdin.write(json.dumps(job).encode())
        box.proc.stdin.close()
    return box


def _read_verdict(fd: int, deadline: float) -> bytes | None:
    """The checker's line, or None if the wall clock ran out first; b'' if it exited without one."""
    data = b""
    while b"\n" not in data and len(data) < VERDICT_BYTES:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return None
        chunk = os.read(fd, VERDICT_BYTES)
        if not chunk:
            break
        data += chunk
    return data


def _outcome(line: bytes) -> tuple[str, str, int]:
    try:
        verdict = json.loads(line)
        status = "passed" if verdict["passed"] is True else "failed"
        return status, str(verdict["reason"]), int(verdict["calls"])
    except (ValueError, KeyError, TypeError):
        return "failed", "the checker exited without a verdict", 0


def run_case(case: Case, *, timeout_s: float, memory_mb: int, sandbox: SandboxSettings) -> Outcome:
    """Judge ``case``; ``timeout_s`` of wall clock for both processes together, from when both sandboxes
    exist (their interpreters' start counts)."""
    limits = _limits(timeout_s, memory_mb)
    stdlib_runtime.runtime()  # found once per process (about a second), never on a case's clock
    calls_r, calls_w = os.pipe()  # checker -> candidate
    answers_r, answers_w = os.pipe()  # candidate -> checker
    verdict_r, verdict_w = os.pipe()  # checker -> here; nothing else holds its write end
    try:
        with contextlib.ExitStack() as stack:
            candidate = _start(
                stack,
                "candidate",
                (calls_r, answers_w),
                {"program": case.program, "entry_point": case.entry_point, "limits": limits},
                sandbox,
            )
            _start(
                stack,
                "checker",
                (answers_r, calls_w, verdict_w),
                {"helpers": case.helpers, "test": case.test, "entry_point": case.entry_point, "limits": limits},
                sandbox,
            )
            start = time.monotonic()
            for fd in (calls_r, calls_w, answers_r, answers_w, verdict_w):
                os.close(fd)
            calls_r = calls_w = answers_r = answers_w = verdict_w = -1
            line = _read_verdict(verdict_r, start + timeout_s)
            wall = time.monotonic() - start
    finally:
        for fd in (calls_r, calls_w, answers_r, answers_w, verdict_w, verdict_r):
            if fd >= 0:
                os.close(fd)
    if line is None:
        return Outcome(
            status="timed_out", reason=f"no verdict within {timeout_s} s", wall_s=wall, sandbox=candidate.record
        )
    status, reason, calls = _outcome(line)
    return Outcome(status=status, reason=reason, calls=calls, wall_s=wall, sandbox=candidate.record)
