"""The records of a CompressionBench evaluation and the verdict under a task (PROTOCOL A5).

A measurement (:func:`infbench.compression.measure.measure`) does not depend on a storage limit; the
verdict applies one task's limit to it: both storage checks, the failing check, the reward or the score.
Records and verdicts need only pydantic, so the many per-task ``verify`` jobs and the tables start in a
second, without the torch stack.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infbench import atomic
from infbench.checks import Check
from infbench.compression.storage import ResidentMeasure
from infbench.compression.submission import GIB
from infbench.compression.tasks import Task
from infbench.operator_secret import OperatorSecret
from infbench.provenance import Provenance
from infbench.sandbox.launch import SandboxRecord


class DecodeTiming(BaseModel):
    """Decode speed at batch 1 (:mod:`infbench.compression.harness.decode`); reported, never scored."""

    prompt_tokens: int
    output_tokens: int
    rounds: int
    requests_per_round: int
    round_means_s: list[float]
    latency_s: float
    tps: float


class DivergenceSummary(BaseModel):
    """The candidate against the source token by token on the scored set
    (:mod:`infbench.compression.divergence`, llama.cpp's ``--kl-divergence`` statistics); reported, never
    judged."""

    tokens: int
    top_k: int  # the source's tokens kept apart per position; the rest of its mass is one outcome
    p_rest_mean: float  # the source's mean probability outside them
    kld_mean: float  # nats per token (a lower bound: the top k plus the rest)
    kld_mean_ci95: tuple[float, float]  # bootstrap over contexts
    kld_percentiles: dict[str, float]  # "p50" ... "p99.9"
    kld_max: float
    same_top_p: float  # share of positions whose most probable token is the source's
    same_top_p_ci95: tuple[float, float]
    dp_mean: float  # delta p = q(y) - p(y) of the sampled token
    dp_rms: float
    dp_percentiles: dict[str, float]  # "p0.1" ... "p99.9"
    dp_min: float
    dp_max: float


class EvaluationRecord(BaseModel):
    kind: str  # "reward" (search set) or "verification" (verification set)
    submission: str
    task: str
    source: str
    limit_gib: float
    content_hash: str | None = None
    runtime: str | None = None
    s_pkg_bytes: int | None = None
    s_res_load_bytes: int | None = None
    s_res_after_inference_bytes: int | None = None
    s_res_bytes: int | None = None
    s_pkg_gib: float | None = None
    s_res_gib: float | None = None
    package_bits_per_param: float | None = None
    tokens_scored: int | None = None
    ppl: float | None = None
    ref_ppl: float | None = None
    f: float | None = None
    f_ci95: tuple[float, float] | None = None
    divergence: DivergenceSummary | None = None  # KL divergence, top-1 agreement, delta p (never judged)
    accuracy: dict[str, float] | None = None
    accuracy_mean: float | None = None
    accuracy_ref: float | None = None
    accuracy_counts: dict[str, tuple[int, int]] | None = None  # (correct, asked) per benchmark
    accuracy_ref_counts: dict[str, tuple[int, int]] | None = None  # the source's A(p), the same questions
    decode: DecodeTiming | None = None
    resident: ResidentMeasure | None = None  # every figure behind S_res, measured from outside the worker
    sandbox: SandboxRecord | None = None
    diagnostics: dict[str, Any] = {}  # reported, never judged (the in-process audit of reads and connections)
    checks: list[Check] = []
    failed_check: str | None = None
    failure: str | None = None
    reward: float | None = None
    score: float | None = None
    wall_s: float = 0.0
    # wall seconds per phase: load, likelihood (the hidden probes included), integrity, accuracy, decode,
    # statefulness (the second process, its load included)
    phase_s: dict[str, float] = {}
    finished_at: datetime | None = None  # UTC; set by the search-time reward (run records order calls by it)
    secret_label: str | None = None  # verification: the operator secret its set and probes were drawn from
    provenance: Provenance | None = None


def verdict(measured: EvaluationRecord, task: Task) -> EvaluationRecord:
    """The measurement judged under ``task``'s storage limit: checks, failing check, reward or score."""
    record = measured.model_copy(deep=True, update={"task": task.name, "limit_gib": task.limit_gib})
    limit = task.limit_gib * GIB
    if record.s_pkg_bytes is not None and record.s_res_bytes is not None:
        record.checks[:0] = [
            Check(
                name="storage_package",
                passed=record.s_pkg_bytes <= limit,
                evidence={"s_pkg_bytes": record.s_pkg_bytes, "limit_bytes": limit},
            ),
            Check(
                name="storage_resident",
                passed=record.s_res_bytes <= limit,
                evidence={
                    "after_load": record.s_res_load_bytes,
                    "after_inference": record.s_res_after_inference_bytes,
                    "limit_bytes": limit,
                },
            ),
        ]
    record.failed_check = next((c.name for c in record.checks if not c.passed), None)
    ok = record.failed_check is None and record.f is not None
    if record.kind == "reward":
        record.reward = 10.0 * record.f if ok else 0.0
    else:
        record.score = record.f if ok else 0.0
    return record


def judge_for_pipeline(measured_json: str, task: dict, out: str, secret: OperatorSecret) -> EvaluationRecord:
    """The final verification record: the verdict, for a measurement drawn from ``secret``."""
    measured = EvaluationRecord.model_validate_json(Path(measured_json).read_text())
    if measured.secret_label != secret.label:
        raise ValueError(f"{measured_json} was measured with {measured.secret_label}, not {secret.label}")
    record = verdict(measured, Task.model_validate(task))
    atomic.write_json(out, record.model_dump(mode="json"))
    return record
