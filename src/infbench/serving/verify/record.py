"""The record of a server submission's verification (PROTOCOL B5) and the documented order of its checks.
pydantic only: the verified table and the operator's release read records without the verifier's stack."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from infbench import provenance
from infbench.checks import Check
from infbench.sandbox.launch import SandboxRecord
from infbench.serving.value import Score

CHECK_ORDER = (
    "submission_files",
    "submission_spec",
    "requirements",
    "launch",
    "complete_prompts",
    "exact_output_lengths",
    "streaming_consistency",
    "session_progress",
    "context_probes",
    "natural_stopping",
    "held_out_answers",
    "server_alive",
    "fidelity",
    "far_context",
)


class SeedReplay(BaseModel):
    seed: int
    records: str
    requests: int
    score: Score


class VerificationRecord(BaseModel):
    submission: str
    directory: str
    spec: dict[str, Any] | None
    concurrency: int | None
    verified: bool
    failed_check: str | None
    failure: str | None
    checks: list[Check]
    replays: list[SeedReplay]
    server_log: str
    command: list[str]
    sandbox: SandboxRecord | None = None  # how the server was isolated (kind "none": unsandboxed, marked)
    wall_s: float
    phase_s: dict[str, float]
    drawn_with: str
    operator_secret: dict[str, str]
    provenance: provenance.Provenance


def in_documented_order(checks: list[Check]) -> list[Check]:
    """The checks in :data:`CHECK_ORDER` (a name outside it last): the record lists them so, and
    ``failed_check`` names the first failure in that order, not in the order the checks ran."""
    last = len(CHECK_ORDER)
    return sorted(checks, key=lambda c: CHECK_ORDER.index(c.name) if c.name in CHECK_ORDER else last)
