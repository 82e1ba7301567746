"""Search-time reward (PROTOCOL A3, A4) and final verification (A5) of a submission.

Both run the submission in a fresh worker process; the pipeline computes every
log-prob from the raw logits it returns, one row per sequence and asked position, each spanning the
source's vocabulary (check ``logits_shape``), read from a pipe of their own in exactly that shape
(check ``logits_transport``, :mod:`infbench.compression.logits_pipe`). Final verification hides its
integrity probes among the scoring requests (:mod:`infbench.compression.probes`),
placed by the operator secret, and once that process has ended asks a second, fresh one of the same
package a few of the rows again (check ``statefulness``). A failure anywhere, expected or not, becomes a
record naming the check that was measuring and the cause, never an exception
that stops the job or other jobs.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from infbench.checks import Check, CheckFailed
from infbench.compression import divergence, held_out, integrity, probes, scoring
from infbench.compression.client import EmptyWorkers, SubmissionProcess, WorkerFailure
from infbench.compression.decode import measure as measure_decode
from infbench.compression.likelihood_files import TopLogProbs, read_continuations, read_top, stack
from infbench.compression.records import DivergenceSummary, EvaluationRecord
from infbench.compression.runtimes import preload_modules
from infbench.compression.storage import ResidentMeasure, memory_cap, workspace_bytes
from infbench.compression.submission import GIB, SubmissionError, check_tokenizer, load_manifest
from infbench.compression.warm_up import SourceShapes
from infbench.config.model import SandboxSettings, VerificationSettings
from infbench.operator_secret import OperatorSecret
from infbench.package_files import PackageFilesError, content_hash, package_bytes
from infbench.provenance import collect as collect_provenance


class EvaluationSettings(VerificationSettings):
    """The ``verification`` section as one job runs it: its device resolved (:func:`device.resolve`), the
    sandbox its workers run in and the CPU threads they are given."""

    sandbox: SandboxSettings
    threads: int = 1

    @classmethod
    def for_job(cls, verification: VerificationSettings, sandbox: SandboxSettings, threads: int) -> EvaluationSettings:
        from infbench.device import resolve

        return cls(
            **{**verification.model_dump(), "device": resolve(verification.device)}, sandbox=sandbox, threads=threads
        )


class _Steps:
    """Which check or phase is measuring now, so that a failure names it; wall seconds per phase."""

    def __init__(self, record: EvaluationRecord):
        self.record, self.now = record, "package"

    @contextlib.contextmanager
    def __call__(self, name: str, phase: str | None = None):
        self.now = name
        start = time.monotonic()
        try:
            yield
        finally:
            if phase:
                self.record.phase_s[phase] = round(time.monotonic() - start, 3)


def _fail(record: EvaluationRecord, name: str, evidence: dict[str, Any]) -> None:
    record.checks.append(Check(name=name, passed=False, evidence=evidence))


@dataclass(frozen=True)
class _Rows:
    """The scored set: contexts, continuations, the sampler's own log-probs, the reference scores and the
    source's top log-probs."""

    contexts: np.ndarray
    continuations: np.ndarray
    sampler: np.ndarray
    reference: np.ndarray
    top: TopLogProbs


GREEDY_PROMPT_TOKENS = 32  # the greedy check's prompt: the first tokens of the first verification row


def _greedy_prompt(rows: _Rows) -> list[int]:
    return np.concatenate([rows.contexts[0], rows.continuations[0]])[:GREEDY_PROMPT_TOKENS].tolist()


def source_shapes(
    source_checkpoint: str | Path,
    *,
    rows: int,
    context_tokens: int,
    continuation_tokens: int,
    settings: VerificationSettings,
) -> SourceShapes:
    """The source's architecture and the shapes of what a measurement sends a worker: each scoring request
    size (probes have the same), the greedy check's prompt and its teacher-forced logits, the timed decoding's
    prompt (:mod:`infbench.compression.warm_up`)."""
    tokens = context_tokens + continuation_tokens
    prompt, greedy = min(GREEDY_PROMPT_TOKENS, tokens), settings.integrity.greedy_tokens
    scoring = {(n, tokens - 1, continuation_tokens) for n in probes.request_sizes(rows, settings.score_batch_size)}
    return SourceShapes(
        config=json.loads((Path(source_checkpoint) / "config.json").read_text()),
        logits=sorted(scoring | {(1, prompt + greedy - 1, greedy)}),
        generations=[(prompt, greedy), (settings.decode.prompt_tokens, 2)],
    )


def _warm_up(source_checkpoint: str, rows: _Rows, settings: EvaluationSettings, preload: list[str]):
    """The source's shapes for workers of a transformers runtime on the CPU; None elsewhere (on CUDA the worker
    warms up on its own)."""
    if settings.device != "cpu" or "transformers" not in preload:
        return None
    n, context_tokens = rows.contexts.shape
    return source_shapes(
        source_checkpoint,
        rows=n,
        context_tokens=context_tokens,
        continuation_tokens=rows.continuations.shape[1],
        settings=settings,
    )


def _read_rows(continuations: str, reference_scores: str, reference_top: str) -> _Rows:
    table = read_continuations(continuations)
    return _Rows(
        contexts=stack(table["context_ids"], np.int32),
        continuations=stack(table["continuation_ids"], np.int32),
        sampler=stack(table["logprobs"], np.float32),
        reference=stack(read_continuations(reference_scores)["logprobs"], np.float32),
        top=read_top(reference_top, table["index"].to_numpy()),
    )


def _score(
    logits: Callable, rows: _Rows, settings: EvaluationSettings, probe_requests: int, probe_seed: int
) -> tuple[np.ndarray, list[probes.Answered], DivergenceSummary]:
    """The scored log-probs, the answered probes and the divergence diagnostics (from the same logits)."""
    schedule = probes.plan(rows.contexts, rows.continuations, settings.score_batch_size, probe_requests, probe_seed)
    observed = divergence.Accumulator(rows.top)
    lp, answered = probes.run(logits, schedule, rows.continuations, observe=observed)
    if not np.all(np.isfinite(lp)):
        raise WorkerFailure("non-finite log-probs", f"{int(np.sum(~np.isfinite(lp)))} tokens")
    summary = observed.summary(rows.reference, lp, n_resamples=settings.bootstrap_resamples, seed=settings.seed)
    return lp, answered, summary


def measure(
    kind: str,
    package: str | Path,
    source: str,
    *,
    source_checkpoint: str,
    n_params: int,
    vocab_size: int,
    continuations: str,
    reference_scores: str,
    reference_top: str,
    settings: EvaluationSettings,
    accuracy_gate: Callable | None = None,
    log_path: str | Path | BinaryIO | None = None,
    secret: OperatorSecret | None = None,
    sample_temperature: float | None = None,
    memory_limit_gib: float | None = None,
    empty_workers: EmptyWorkers | None = None,
) -> EvaluationRecord:
    """Everything about ``package`` that does not depend on a storage limit; ``kind``: reward or verification.

    Verification needs the operator ``secret`` (where the probes go) and the temperature the set was
    sampled at (``likelihood_above_source`` applies at 1). ``memory_limit_gib``: the largest storage limit the
    package is judged under, from which its sandbox's hard memory limit is set (:func:`storage.memory_cap`).
    ``reference_top``: the set's ``reference_top.npz``, for the divergence diagnostics (reported, never judged).
    ``empty_workers``: where the empty worker that ``S_res`` is measured against comes from; by default one is
    measured beside this package's worker.
    """
    start = time.monotonic()
    package = Path(package)
    record = EvaluationRecord(kind=kind, submission=package.name, task="", source=source, limit_gib=0.0)
    verifying = kind == "verification"
    if verifying and (secret is None or sample_temperature is None):
        raise ValueError("final verification needs the operator secret and the sampling temperature")
    record.secret_label = secret.label if verifying else None
    rows = _read_rows(continuations, reference_scores, reference_top)
    step = _Steps(record)
    stack = contextlib.ExitStack()
    try:
        manifest = load_manifest(package)
        record.runtime = manifest.runtime
        if manifest.source != source:
            raise SubmissionError(
                f"{package}/manifest.yaml: field 'source' is '{manifest.source}', the task compresses '{source}'"
            )
        with step("tokenizer"):
            check_tokenizer(package, manifest, source_checkpoint)
        with step("package"):
            record.content_hash = content_hash(package)
            record.s_pkg_bytes = package_bytes(package)
        record.s_pkg_gib = record.s_pkg_bytes / GIB
        record.package_bits_per_param = 8 * record.s_pkg_bytes / n_params
        # A package over every limit it is judged under fails storage_package, the first check, whatever else
        # is measured: its likelihood, memory and decode speed are reported, its integrity checks not run.
        checking = verifying and not _over_every_limit(record, memory_limit_gib)
        preload = preload_modules(package, manifest)
        log = stack.enter_context(open(log_path, "ab")) if isinstance(log_path, (str, Path)) else log_path
        process = dict(
            sandbox=settings.sandbox,
            preload=preload,
            device=settings.device,
            threads=settings.threads,
            timeout_s=settings.timeout_s,
            log_path=log,
            vocab_size=vocab_size,
            warm_up=_warm_up(source_checkpoint, rows, settings, preload),
        )
        # The measured worker imports its runtime while the baseline worker is measured (both only import
        # until the package is loaded); its hard memory limit, which follows from the baseline, is set first.
        with SubmissionProcess(package, **process) as proc:
            with step("baseline"):
                baseline, device_baseline = (empty_workers or EmptyWorkers()).memory(**process)
            cap = (
                None
                if memory_limit_gib is None
                else memory_cap(
                    limit_bytes=int(memory_limit_gib * GIB),
                    s_pkg_bytes=record.s_pkg_bytes,
                    baseline=baseline,
                    allowance_bytes=int(settings.runtime_allowance_mib * 2**20),
                    workspace_bytes=workspace_bytes(
                        settings.memory_workspace,
                        batch=settings.score_batch_size,
                        n_last=rows.continuations.shape[1],
                        vocab=vocab_size,
                    ),
                )
            )
            if cap is not None:
                proc.limit_memory(cap)
            # The statefulness check's second worker imports its runtime while this one works; it loads the
            # package only once this one has ended (:func:`_fresh_process_check`).
            fresh = (
                stack.enter_context(SubmissionProcess(package, **process, memory_limit_bytes=cap)) if checking else None
            )
            record.sandbox = proc.sandbox_record
            with step("load", phase="load"):
                loaded = proc.load()
                after_load, device_after_load = proc.memory(), proc.device_memory()
            logits = proc.logits  # every answer (sequences, n_last, the source's vocabulary) or logits_shape
            with step("likelihood", phase="likelihood"):
                lp, answered, record.divergence = _score(
                    logits,
                    rows,
                    settings,
                    settings.integrity.probe_requests if checking else 0,
                    held_out.probe_seed(secret, source, settings.seed) if checking else 0,
                )
            record.checks.append(Check(name="logits_shape", passed=True, evidence={"source_vocab": vocab_size}))
            record.tokens_scored = int(lp.size)
            record.ppl, record.ref_ppl = scoring.perplexity(lp), scoring.perplexity(rows.reference)
            record.f = scoring.ppl_ratio(rows.reference, lp)
            record.f_ci95 = scoring.bootstrap_ppl_ratio(
                rows.reference, lp, n_resamples=settings.bootstrap_resamples, seed=settings.seed
            )
            if checking:
                _verification_checks(
                    proc,
                    logits,
                    vocab_size,
                    record,
                    rows,
                    lp,
                    answered,
                    settings,
                    accuracy_gate,
                    step,
                    sample_temperature,
                )
            if fresh is not None:  # idle, waiting for its turn, before decoding is timed
                fresh.renew_budget()
                fresh.wait_started()
            with step("decode", phase="decode"):
                record.decode = measure_decode(
                    proc.generate, vocab_size=vocab_size, seed=settings.seed, **settings.decode.model_dump()
                )
            with step("release"):
                released = proc.release()
                after_inference, device_after_inference = proc.memory(), proc.device_memory()
            record.resident = ResidentMeasure(
                baseline=baseline,
                after_load=after_load,
                after_inference=after_inference,
                inprocess_after_load=int(loaded["inprocess_resident_bytes"]),
                inprocess_after_inference=int(released["inprocess_resident_bytes"]),
                peak_rss_bytes=proc.peaks(),
                device_baseline=device_baseline,
                device_after_load=device_after_load,
                device_after_inference=device_after_inference,
                runtime_allowance_bytes=int(settings.runtime_allowance_mib * 2**20),
            )
            record.s_res_load_bytes = record.resident.s_res_after_load
            record.s_res_after_inference_bytes = record.resident.s_res_after_inference
            if verifying:
                record.diagnostics["in_process_audit"] = proc.access()
        record.s_res_bytes = max(record.s_res_load_bytes, record.s_res_after_inference_bytes)
        record.s_res_gib = record.s_res_bytes / GIB
        if checking:
            with step("statefulness", phase="statefulness"):
                _insert_after_probes(record.checks, _fresh_process_check(fresh, rows, lp, settings, secret, source))
    except (SubmissionError, PackageFilesError) as exc:
        record.failure = str(exc)
        _fail(record, step.now, {"error": str(exc)})
    except WorkerFailure as exc:
        record.failure = str(exc)[:4000]
        _fail(
            record,
            exc.cause if exc.cause in ("sandbox", "memory_limit") else "execution",
            {"cause": exc.cause, "during": step.now, "error": str(exc)[:4000]},
        )
    except CheckFailed as exc:
        record.failure = str(exc)[:4000]
        _fail(record, exc.check, exc.evidence)
    except Exception as exc:  # anything else the package provoked: a failure record, never a crashed job
        record.failure = f"{step.now}: {type(exc).__name__}: {exc}"[:4000]
        _fail(
            record,
            step.now,
            {"cause": type(exc).__name__, "error": str(exc)[:4000], "traceback": traceback.format_exc()[-4000:]},
        )
    finally:
        stack.close()
    record.wall_s = time.monotonic() - start
    record.provenance = collect_provenance(
        {
            "kind": kind,
            "source": source,
            "settings": settings.model_dump(),
            "secret": secret.public() if verifying else None,
        },
        {"submission": record.content_hash or ""},
    )
    return record


def _over_every_limit(record: EvaluationRecord, limit_gib: float | None) -> bool:
    """Whether the package exceeds ``limit_gib``, the largest limit it is judged under (said in the record)."""
    if limit_gib is None or record.s_pkg_bytes <= limit_gib * GIB:
        return False
    record.diagnostics["checks_not_run"] = (
        f"the package ({record.s_pkg_gib:.3f} GiB) exceeds every storage limit it is judged under (the largest: "
        f"{limit_gib:g} GiB), so it fails storage_package whatever else is measured; the integrity checks, the "
        f"accuracy gate and the statefulness check were not run"
    )
    return True


def _fresh_process_check(
    fresh: SubmissionProcess,
    rows: _Rows,
    lp: np.ndarray,
    settings: EvaluationSettings,
    secret: OperatorSecret,
    source: str,
) -> Check:
    """``statefulness``: stitched rows, then their originals, among ordinary rows, answered by a second worker
    that loads the package after the first has ended (nothing of it is left to talk to; the two sandboxes
    share no namespace, no writable directory and no package code ran in the second before), compared with
    the first's scores."""
    schedule = probes.plan_fresh(
        rows.contexts,
        rows.continuations,
        settings.score_batch_size,
        settings.integrity.statefulness_rows,
        held_out.fresh_process_seed(secret, source, settings.seed),
    )
    fresh.renew_budget()
    fresh.load()
    _, answered = probes.run(fresh.logits, schedule, rows.continuations, progress=False)
    return probes.statefulness(lp, answered, settings.integrity.tolerance)


def _insert_after_probes(checks: list[Check], check: Check) -> None:
    """``check`` beside the probes of the first process, so that a record's checks read in one order."""
    names = [c.name for c in checks]
    at = max((i + 1 for i, name in enumerate(names) if name in probes.PROBE_KINDS), default=len(checks))
    checks.insert(at, check)


def _verification_checks(
    proc,
    logits: Callable,
    vocab: int,
    record: EvaluationRecord,
    rows: _Rows,
    lp: np.ndarray,
    answered: list[probes.Answered],
    settings: EvaluationSettings,
    accuracy_gate,
    step: _Steps,
    temperature: float,
) -> None:
    s = settings.integrity
    with step("integrity", phase="integrity"):
        record.checks.extend(probes.checks(lp, answered, s.tolerance))
        record.checks.append(
            integrity.likelihood_above_source(rows.sampler, lp, temperature=temperature, alpha=s.likelihood_alpha)
        )
        with step("greedy_matches_argmax"):
            record.checks.append(
                integrity.greedy_matches_argmax(
                    logits, proc.generate, _greedy_prompt(rows), s.greedy_tokens, s.tie_margin, vocab
                )
            )
    if accuracy_gate is not None:
        with step("accuracy_gate", phase="accuracy"):
            gate = accuracy_gate(proc)
        record.accuracy, record.accuracy_mean, record.accuracy_ref = (
            gate["per_benchmark"],
            gate["mean"],
            gate["reference"],
        )
        record.accuracy_counts, record.accuracy_ref_counts = gate["counts"], gate["reference_counts"]
        record.checks.append(Check(name="accuracy_gate", passed=gate["passed"], evidence=gate["evidence"]))
