"""Search-time reward (PROTOCOL A3, A4) and final verification (A5) of a submission.

Both run the submission in a fresh worker process; the pipeline computes every
log-prob from the raw logits it returns. A failure anywhere becomes a record
naming the failing check, never an exception that stops other jobs.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import numpy as np
from pydantic import BaseModel, ConfigDict

from infbench.provenance import Provenance, collect as collect_provenance
from infbench.compression import integrity, scoring
from infbench.compression.decode import DecodeTiming, measure as measure_decode
from infbench.compression.client import SubmissionProcess, WorkerFailure
from infbench.compression.integrity import Check
from infbench.compression.likelihood import read_continuations, stack
from infbench.compression.runtimes import preload_modules
from infbench.compression.storage import ResidentMeasure
from infbench.compression.tasks import Task  # re-exported: records and verdicts take it
from infbench.compression.submission import GIB, SubmissionError, check_tokenizer, content_hash, load_manifest, package_bytes
from infbench.sandbox.launch import SandboxRecord, SandboxSettings


class DecodeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompt_tokens: int
    output_tokens: int
    rounds: int
    requests_per_round: int
    warmup: int


class IntegritySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sequences: int
    tolerance: float
    tie_margin: float
    greedy_tokens: int


class EvaluationSettings(BaseModel):
    """Config ``verification`` after schema validation (defaults live in the schema only)."""

    model_config = ConfigDict(extra="forbid")
    device: str
    timeout_s: float
    runtime_allowance_mib: float
    score_batch_size: int
    bootstrap_resamples: int
    seed: int
    decode: DecodeSettings
    integrity: IntegritySettings
    sandbox: SandboxSettings
    threads: int = 1


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
    accuracy: dict[str, float] | None = None
    accuracy_mean: float | None = None
    accuracy_ref: float | None = None
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
    phase_s: dict[str, float] = {}  # wall seconds per phase: load, likelihood, integrity, accuracy, decode
    finished_at: datetime | None = None  # UTC; set by the search-time reward (run records order calls by it)
    provenance: Provenance | None = None


@contextlib.contextmanager
def _timed(record: EvaluationRecord, phase: str):
    start = time.monotonic()
    try:
        yield
    finally:
        record.phase_s[phase] = round(time.monotonic() - start, 3)


def _fail(record: EvaluationRecord, name: str, evidence: dict[str, Any]) -> None:
    record.checks.append(Check(name=name, passed=False, evidence=evidence))


def _likelihood(proc: SubmissionProcess, continuations: str, ref_scores: np.ndarray | None, settings) -> dict:
    table = read_continuations(continuations)
    ctx, cont = stack(table["context_ids"], np.int32), stack(table["continuation_ids"], np.int32)
    lp = scoring.score_continuations(proc.logits_fn(), ctx, cont, batch_size=settings.score_batch_size)
    if not np.all(np.isfinite(lp)):
        raise WorkerFailure("non-finite log-probs", f"{int(np.sum(~np.isfinite(lp)))} tokens")
    return {"logprobs": lp, "contexts": ctx, "continuations": cont}


def measure(kind: str, package: str | Path, source: str, *, source_checkpoint: str, n_params: int,
            vocab_size: int, continuations: str, reference_scores: str, settings: EvaluationSettings,
            accuracy_gate: Callable | None = None, log_path: str | None = None) -> EvaluationRecord:
    """Everything about ``package`` that does not depend on a storage limit; ``kind``: reward or verification."""
    start = time.monotonic()
    package = Path(package)
    record = EvaluationRecord(kind=kind, submission=package.name, task="", source=source, limit_gib=0.0)
    ref = stack(read_continuations(reference_scores)["logprobs"], np.float32)
    try:
        manifest = load_manifest(package)
        record.runtime = manifest.runtime
        if manifest.source != source:
            raise SubmissionError(f"{package}/manifest.yaml: field 'source' is '{manifest.source}', "
                                  f"the task compresses '{source}'")
        check_tokenizer(package, manifest, source_checkpoint)
        record.content_hash = content_hash(package)
        record.s_pkg_bytes = package_bytes(package)
        record.s_pkg_gib = record.s_pkg_bytes / GIB
        record.package_bits_per_param = 8 * record.s_pkg_bytes / n_params
        preload = preload_modules(package, manifest)
        process = dict(sandbox=settings.sandbox, preload=preload, device=settings.device, threads=settings.threads,
                       timeout_s=settings.timeout_s, log_path=log_path)
        with SubmissionProcess(None, baseline=True, **process) as empty:
            baseline = empty.memory()
        with SubmissionProcess(package, **process) as proc:
            record.sandbox = proc.sandbox_record
            with _timed(record, "load"):
                loaded = proc.load()
                after_load = proc.memory()
            with _timed(record, "likelihood"):
                result = _likelihood(proc, continuations, ref, settings)
            lp = result["logprobs"]
            record.tokens_scored = int(lp.size)
            record.ppl, record.ref_ppl = scoring.perplexity(lp), scoring.perplexity(ref)
            record.f = scoring.ppl_ratio(ref, lp)
            record.f_ci95 = scoring.bootstrap_ppl_ratio(ref, lp, n_resamples=settings.bootstrap_resamples,
                                                        seed=settings.seed)
            if kind == "verification":
                _verification_checks(proc, record, result, vocab_size, settings, accuracy_gate)
            with _timed(record, "decode"):
                record.decode = measure_decode(proc.generate, vocab_size=vocab_size, seed=settings.seed,
                                               **settings.decode.model_dump())
            released = proc.release()
            after_inference = proc.memory()
            record.resident = ResidentMeasure(
                baseline=baseline, after_load=after_load, after_inference=after_inference,
                inprocess_after_load=int(loaded["inprocess_resident_bytes"]),
                inprocess_after_inference=int(released["inprocess_resident_bytes"]), peak_rss_bytes=proc.peaks(),
                runtime_allowance_bytes=int(settings.runtime_allowance_mib * 2**20))
            record.s_res_load_bytes = record.resident.s_res_after_load
            record.s_res_after_inference_bytes = record.resident.s_res_after_inference
            if kind == "verification":
                record.diagnostics["in_process_audit"] = proc.access()
        record.s_res_bytes = max(record.s_res_load_bytes, record.s_res_after_inference_bytes)
        record.s_res_gib = record.s_res_bytes / GIB
    except SubmissionError as exc:
        record.failure = str(exc)
        _fail(record, "package", {"error": str(exc)})
    except WorkerFailure as exc:
        record.failure = str(exc)[:4000]
        _fail(record, "sandbox" if exc.cause == "sandbox" else "execution",
              {"cause": exc.cause, "error": str(exc)[:4000]})
    record.wall_s = time.monotonic() - start
    record.provenance = collect_provenance({"kind": kind, "source": source, "settings": settings.model_dump()},
                                           {"submission": record.content_hash or ""})
    return record


def verdict(measured: EvaluationRecord, task: Task) -> EvaluationRecord:
    """The measurement judged under ``task``'s storage limit: checks, failing check, reward or score."""
    record = measured.model_copy(deep=True, update={"task": task.name, "limit_gib": task.limit_gib})
    limit = task.limit_gib * GIB
    if record.s_pkg_bytes is not None and record.s_res_bytes is not None:
        record.checks[:0] = [
            Check(name="storage_package", passed=record.s_pkg_bytes <= limit,
                  evidence={"s_pkg_bytes": record.s_pkg_bytes, "limit_bytes": limit}),
            Check(name="storage_resident", passed=record.s_res_bytes <= limit,
                  evidence={"after_load": record.s_res_load_bytes,
                            "after_inference": record.s_res_after_inference_bytes, "limit_bytes": limit}),
        ]
    record.failed_check = next((c.name for c in record.checks if not c.passed), None)
    ok = record.failed_check is None and record.f is not None
    if record.kind == "reward":
        record.reward = 10.0 * record.f if ok else 0.0
    else:
        record.score = record.f if ok else 0.0
    return record


def _verification_checks(proc, record: EvaluationRecord, result: dict, vocab: int, settings, accuracy_gate) -> None:
    with _timed(record, "integrity"):
        _integrity_checks(proc, record, result, vocab, settings)
    if accuracy_gate is not None:
        with _timed(record, "accuracy"):
            gate = accuracy_gate(proc)
        record.accuracy, record.accuracy_mean, record.accuracy_ref = gate["per_benchmark"], gate["mean"], gate["reference"]
        record.checks.append(Check(name="accuracy_gate", passed=gate["passed"], evidence=gate["evidence"]))


def _integrity_checks(proc, record: EvaluationRecord, result: dict, vocab: int, settings) -> None:
    s = settings.integrity
    ids = np.concatenate([result["contexts"], result["continuations"]], axis=1)[:s.sequences]
    ids = ids[:, :min(ids.shape[1], 96)].astype(np.int64)
    record.checks.append(integrity.causality(proc.logits, ids, ids.shape[1] // 2, vocab, s.tolerance, settings.seed))
    record.checks.append(integrity.greedy_matches_argmax(proc.logits, proc.generate, ids[0, :32].tolist(),
                                                         s.greedy_tokens, s.tie_margin))
    record.checks.extend(integrity.batch_invariance_and_determinism(proc.logits, ids, ids.shape[1] // 2,
                                                                    s.tolerance))
