"""Search-time reward (PROTOCOL A3, A4) and final verification (A5) of a package: one :class:`MeasureJob`,
one function per phase.

The package runs in a fresh, sandboxed worker (:class:`~infbench.compression.client.SubmissionProcess`) and is
driven as a causal next-token function (:mod:`infbench.compression.package_api`): load, then the likelihood
(tokens revealed only once scored: :mod:`.harness.likelihood`), the integrity checks construction leaves
(:mod:`.integrity`), the accuracy gate (greedy, every token the argmax of the package's logits:
:mod:`.accuracy`), the decode timing (:mod:`.harness.decode`), release and the memory measured from outside;
for a package with code of its own, a second, fresh worker (``statefulness``). A failure anywhere, expected or
not, becomes a record naming the check or phase that was running and the cause, never an exception that stops
the job or other jobs.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from infbench.checks import Check, CheckFailed
from infbench.compression import accuracy, divergence, held_out, integrity, scoring
from infbench.compression.client import EmptyWorkers, SubmissionProcess, WorkerFailure
from infbench.compression.harness import decode
from infbench.compression.harness.likelihood import answers_teacher_forced, batches, teacher_forced
from infbench.compression.likelihood_files import TopLogProbs, read_continuations, read_top, stack
from infbench.compression.package_api import TRUSTED
from infbench.compression.records import EvaluationRecord
from infbench.compression.runtimes import preload_modules, worker_launch
from infbench.compression.runtimes.hf import PREFILL_BLOCK
from infbench.compression.storage import ResidentMeasure, memory_cap, workspace_bytes
from infbench.compression.submission import GIB, Manifest, SubmissionError, check_tokenizer, load_manifest
from infbench.compression.warm_up import SourceShapes
from infbench.config.model import SandboxSettings, VerificationSettings
from infbench.errors import InfbenchError
from infbench.operator_secret import OperatorSecret
from infbench.package_files import PackageFilesError, content_hash, package_bytes
from infbench.provenance import collect as collect_provenance
from infbench.vllm_env import VllmEnvironmentMissing


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


class LikelihoodSet(BaseModel):
    """The files of the scored set: the sampled continuations (and the sampler's log-probs), the reference
    scores and the source's top log-probs (``reference_top.npz``, for the divergence diagnostics)."""

    model_config = ConfigDict(frozen=True)

    continuations: str
    reference_scores: str
    reference_top: str


class MeasureJob(BaseModel):
    """What one measurement is given. ``kind``: reward (search set) or verification (the verification set, with
    the operator ``secret`` and the temperature the set was sampled at: ``likelihood_above_source`` applies at
    1). ``memory_limit_gib``: the largest storage limit the package is judged under, from which its sandbox's
    hard memory limit is set (:func:`storage.memory_cap`). ``gate``: the accuracy gate (final verification)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["reward", "verification"]
    package: Path
    source: str
    source_checkpoint: str
    n_params: int
    vocab_size: int
    scored: LikelihoodSet
    settings: EvaluationSettings
    secret: OperatorSecret | None = None
    sample_temperature: float | None = None
    memory_limit_gib: float | None = None
    gate: accuracy.GateJob | None = None

    @property
    def verifying(self) -> bool:
        return self.kind == "verification"


@dataclass(frozen=True)
class Rows:
    """The scored set: contexts, continuations, the sampler's own log-probs, the reference scores and the
    source's top log-probs."""

    contexts: np.ndarray
    continuations: np.ndarray
    sampler: np.ndarray
    reference: np.ndarray
    top: TopLogProbs

    @classmethod
    def read(cls, scored: LikelihoodSet) -> Rows:
        table = read_continuations(scored.continuations)
        return cls(
            contexts=stack(table["context_ids"], np.int32),
            continuations=stack(table["continuation_ids"], np.int32),
            sampler=stack(table["logprobs"], np.float32),
            reference=stack(read_continuations(scored.reference_scores)["logprobs"], np.float32),
            top=read_top(scored.reference_top, table["index"].to_numpy()),
        )


def source_shapes(
    source_checkpoint: str | Path,
    *,
    rows: int,
    context_tokens: int,
    continuation_tokens: int,
    settings: VerificationSettings,
    gate_batch: int,
    gate_answers: Iterable[tuple[int, int]] = (),
) -> SourceShapes:
    """The source's architecture and the shapes of what a measurement sends a worker: one-pass scoring
    requests (the likelihood set's batches; ``gate_answers``: the (prompt, answer) lengths that
    ``gate_consistency`` scores one row at a time), the batches a generation prefills and steps (the likelihood
    revealed one token at a time, the gate's batches, the timed decoding) (:mod:`infbench.compression.warm_up`)."""
    tokens = context_tokens + continuation_tokens
    sizes = sorted({len(b) for b in batches(rows, settings.score_batch_size)})
    gate_answers = list(gate_answers)
    answers = sorted({(1, prompt + answer - 1, answer) for prompt, answer in gate_answers})
    longest_prompt = max((prompt for prompt, _ in gate_answers), default=PREFILL_BLOCK)
    return SourceShapes(
        config=json.loads((Path(source_checkpoint) / "config.json").read_text()),
        scores=[*[(n, tokens - 1, continuation_tokens) for n in sizes], *answers],
        generations=[
            *[(n, context_tokens, 2) for n in sizes],
            # the gate's batches: every row count a batch can start with (its last batches are smaller), the
            # full batch at the longest prompt, then a step for each row count as rows end
            *[(n, PREFILL_BLOCK, 1) for n in range(1, gate_batch)],
            (gate_batch, longest_prompt, 2),
            (gate_batch, PREFILL_BLOCK, gate_batch),
            (1, settings.decode.prompt_tokens, 2),
        ],
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


@dataclass
class _Run:
    """One measurement as it goes: its job, the scored set, the record so far and the phase running."""

    job: MeasureJob
    rows: Rows
    record: EvaluationRecord
    step: _Steps
    manifest: Manifest | None = None
    lp: np.ndarray | None = None
    workers: dict[str, Any] = field(default_factory=dict)

    @property
    def settings(self) -> EvaluationSettings:
        return self.job.settings

    @property
    def one_pass(self) -> bool:
        return self.manifest.runtime in TRUSTED


def _package(run: _Run) -> None:
    """The manifest, the tokenizer and the package's bytes."""
    job, record = run.job, run.record
    run.manifest = load_manifest(job.package)
    record.runtime = run.manifest.runtime
    if run.manifest.source != job.source:
        raise SubmissionError(
            f"{job.package}/manifest.yaml: field 'source' is '{run.manifest.source}', the task compresses "
            f"'{job.source}'"
        )
    with run.step("tokenizer"):
        check_tokenizer(job.package, run.manifest, job.source_checkpoint)
    with run.step("package"):
        record.content_hash = content_hash(job.package)
        record.s_pkg_bytes = package_bytes(job.package)
    record.s_pkg_gib = record.s_pkg_bytes / GIB
    record.package_bits_per_param = 8 * record.s_pkg_bytes / job.n_params


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


def _process(run: _Run, log: BinaryIO | None, checking: bool) -> dict:
    """The settings every worker of this measurement is started with (``checking``: the gate will run)."""
    job, settings, rows = run.job, run.settings, run.rows
    preload = preload_modules(job.package, run.manifest)
    n, context_tokens = rows.contexts.shape
    m = rows.continuations.shape[1]
    gate_batch = job.gate.answers.batch_size if job.gate else 1
    warm = None
    if settings.device == "cpu" and "transformers" in preload:  # on CUDA the worker warms up on its own
        warm = source_shapes(
            job.source_checkpoint,
            rows=n,
            context_tokens=context_tokens,
            continuation_tokens=m,
            settings=settings,
            gate_batch=gate_batch,
            gate_answers=_gate_answer_shapes(job.gate) if checking and job.gate is not None else (),
        )
    batch = min(settings.score_batch_size, n)
    return dict(
        launch=worker_launch(run.manifest, vllm_kv_cache_mib=settings.vllm_kv_cache_mib),
        sandbox=settings.sandbox,
        preload=preload,
        device=settings.device,
        threads=settings.threads,
        timeout_s=settings.timeout_s,
        log_path=log,
        vocab_size=job.vocab_size,
        max_logits=max(batch * m, gate_batch) * job.vocab_size,
        warm_up=warm,
    )


def _gate_answer_shapes(gate: accuracy.GateJob) -> list[tuple[int, int]]:
    """The (prompt, answer) lengths of the items ``gate_consistency`` scores; none where the gate's reference
    cannot be read or was made with other questions (the gate then fails with its own error)."""
    try:
        _, prompts, tokens, _ = accuracy.source_answers(gate)
    except (InfbenchError, KeyError):
        return []
    return [(len(p), len(a)) for p, a in zip(prompts, tokens)]


def _memory_cap(run: _Run, baseline) -> int | None:
    job, settings = run.job, run.settings
    if job.memory_limit_gib is None:
        return None
    return memory_cap(
        limit_bytes=int(job.memory_limit_gib * GIB),
        s_pkg_bytes=run.record.s_pkg_bytes,
        baseline=baseline,
        allowance_bytes=int(settings.runtime_allowance_mib * 2**20),
        workspace_bytes=workspace_bytes(
            settings.memory_workspace,
            batch=settings.score_batch_size,
            n_last=run.rows.continuations.shape[1],
            vocab=job.vocab_size,
        ),
        engine_workspace_bytes=_engine_workspace(run),
    )


def _engine_workspace(run: _Run) -> int:
    """What vLLM's engine holds beside a ``vllm`` package's model: its KV pool and buffers (0 elsewhere)."""
    s = run.settings
    return (s.vllm_kv_cache_mib + s.vllm_workspace_mib) << 20 if run.manifest.runtime == "vllm" else 0


def _likelihood(run: _Run, proc: SubmissionProcess) -> None:
    """``F``: the set's continuations teacher-forced through the package, every log-prob computed here from its
    raw logits, with the divergence diagnostics from the same logits."""
    rows, record, settings = run.rows, run.record, run.settings
    observed = divergence.Accumulator(rows.top)
    lp = teacher_forced(
        proc,
        rows.contexts,
        rows.continuations,
        batch_size=settings.score_batch_size,
        one_pass=run.one_pass,
        observe=observed,
    )
    if not np.all(np.isfinite(lp)):
        raise WorkerFailure("non-finite log-probs", f"{int(np.sum(~np.isfinite(lp)))} tokens")
    record.divergence = observed.summary(
        rows.reference, lp, n_resamples=settings.bootstrap_resamples, seed=settings.seed
    )
    record.checks.append(Check(name="logits_shape", passed=True, evidence={"source_vocab": run.job.vocab_size}))
    record.tokens_scored = int(lp.size)
    record.ppl, record.ref_ppl = scoring.perplexity(lp), scoring.perplexity(rows.reference)
    record.f = scoring.ppl_ratio(rows.reference, lp)
    record.f_ci95 = scoring.bootstrap_ppl_ratio(
        rows.reference, lp, n_resamples=settings.bootstrap_resamples, seed=settings.seed
    )
    run.lp = lp


def _integrity(run: _Run) -> None:
    run.record.checks.append(
        integrity.likelihood_above_source(
            run.rows.sampler,
            run.lp,
            temperature=run.job.sample_temperature,
            alpha=run.settings.integrity.likelihood_alpha,
        )
    )


def _gate(run: _Run, proc: SubmissionProcess) -> None:
    record = run.record
    result = accuracy.gate(run.job.gate, proc, proc.sandbox_settings)
    record.accuracy, record.accuracy_mean, record.accuracy_ref = (
        result["per_benchmark"],
        result["mean"],
        result["reference"],
    )
    record.accuracy_counts, record.accuracy_ref_counts = result["counts"], result["reference_counts"]
    record.checks.append(Check(name="accuracy_gate", passed=result["passed"], evidence=result["evidence"]))


def _gate_consistency(run: _Run, proc: SubmissionProcess) -> None:
    """The candidate's log-probs of the source's greedy answers to the gate's questions (teacher-forced as the
    likelihood set is), against the source's own, beside its excess on the verification set."""
    ids, prompts, tokens, source = accuracy.source_answers(run.job.gate)
    candidate = answers_teacher_forced(
        proc, prompts, tokens, batch_size=run.job.gate.answers.batch_size, one_pass=run.one_pass
    )
    s = run.settings.integrity
    run.record.checks.append(
        integrity.gate_consistency(
            [np.asarray(lp, dtype=np.float64) for lp in source],
            candidate,
            ids,
            verification_excess=float(np.mean(run.rows.reference.astype(np.float64) - run.lp)),
            ratio=s.gate_excess_ratio,
            margin=s.gate_excess_margin,
        )
    )


def _decode(run: _Run, proc: SubmissionProcess) -> None:
    run.record.decode = decode.measure(
        proc, vocab_size=run.job.vocab_size, seed=run.settings.seed, **run.settings.decode.model_dump()
    )


def _statefulness_rows(run: _Run) -> np.ndarray:
    n = len(run.rows.contexts)
    rng = np.random.default_rng(held_out.fresh_process_seed(run.job.secret, run.job.source, run.settings.seed))
    return rng.permutation(n)[: min(run.settings.integrity.statefulness_rows, n)]


def _statefulness(run: _Run, fresh: SubmissionProcess) -> Check:
    """A second worker, loaded once the first has ended and the page cache of the files both see has been dropped
    (:mod:`infbench.sandbox.page_cache`: nothing the first left there survives), scores rows of the set again
    (drawn by the secret, in a batch of their own), revealed one token at a time: its log-probs must be the first
    process's."""
    rows = _statefulness_rows(run)
    fresh.renew_budget()
    run.record.diagnostics["page_cache_forgotten"] = fresh.forget_page_cache()
    fresh.load()
    again = teacher_forced(
        fresh,
        run.rows.contexts,
        run.rows.continuations,
        batch_size=len(rows),
        one_pass=False,
        rows=rows,
    )
    return integrity.statefulness(run.lp, again, rows, run.settings.integrity.tolerance)


def _measure_worker(run: _Run, proc: SubmissionProcess, fresh: SubmissionProcess | None, checking: bool) -> None:
    """Everything the measured worker is asked, in order, and its memory measured from outside."""
    record, step = run.record, run.step
    record.sandbox = proc.sandbox_record
    with step("load", phase="load"):
        loaded = proc.load()
        after_load, device_after_load = proc.memory(), proc.device_memory()
    with step("likelihood", phase="likelihood"):
        _likelihood(run, proc)
    if checking:
        with step("integrity", phase="integrity"):
            _integrity(run)
        if run.job.gate is not None:
            with step("accuracy_gate", phase="accuracy"):
                _gate(run, proc)
            with step("gate_consistency", phase="gate_consistency"):
                _gate_consistency(run, proc)
    if fresh is not None:  # idle, waiting for its turn, before decoding is timed
        fresh.renew_budget()
        fresh.wait_started()
    with step("decode", phase="decode"):
        _decode(run, proc)
    with step("release"):
        released = proc.release()
        after_inference, device_after_inference = proc.memory(), proc.device_memory()
    baseline, device_baseline = run.workers["baseline"]
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
        runtime_allowance_bytes=int(run.settings.runtime_allowance_mib * 2**20),
        engine=run.manifest.runtime == "vllm",
    )
    record.s_res_load_bytes = record.resident.s_res_after_load
    record.s_res_after_inference_bytes = record.resident.s_res_after_inference
    if run.job.verifying:
        record.diagnostics["in_process_audit"] = proc.access()


def _fail(run: _Run, exc: Exception) -> None:
    """``exc`` as the record's failure, naming the check or phase that was running."""
    record, now = run.record, run.step.now
    if isinstance(exc, (SubmissionError, PackageFilesError)):
        record.failure, name, evidence = str(exc), now, {"error": str(exc)}
    elif isinstance(exc, WorkerFailure):
        record.failure = str(exc)[:4000]
        name = exc.cause if exc.cause in ("sandbox", "memory_limit") else "execution"
        evidence = {"cause": exc.cause, "during": now, "error": str(exc)[:4000]}
    elif isinstance(exc, CheckFailed):
        record.failure, name, evidence = str(exc)[:4000], exc.check, exc.evidence
    else:  # anything else the package provoked: a failure record, never a crashed job
        record.failure = f"{now}: {type(exc).__name__}: {exc}"[:4000]
        name = now
        evidence = {"cause": type(exc).__name__, "error": str(exc)[:4000], "traceback": traceback.format_exc()[-4000:]}
    record.checks.append(Check(name=name, passed=False, evidence=evidence))


def measure(
    job: MeasureJob, *, log: str | Path | BinaryIO | None = None, empty_workers: EmptyWorkers | None = None
) -> EvaluationRecord:
    """Everything about ``job.package`` that does not depend on a storage limit. ``log``: where the workers'
    output goes; ``empty_workers``: where the empty worker that ``S_res`` is measured against comes from (by
    default one is measured beside this package's worker)."""
    start = time.monotonic()
    if job.verifying and (job.secret is None or job.sample_temperature is None):
        raise ValueError("final verification needs the operator secret and the sampling temperature")
    record = EvaluationRecord(kind=job.kind, submission=job.package.name, task="", source=job.source, limit_gib=0.0)
    record.secret_label = job.secret.label if job.verifying else None
    run = _Run(job, Rows.read(job.scored), record, _Steps(record))
    with contextlib.ExitStack() as stack:
        try:
            _package(run)
            # A package over every limit it is judged under fails storage_package, the first check, whatever else
            # is measured: its likelihood, memory and decode speed are reported, its integrity checks not run.
            checking = job.verifying and not _over_every_limit(record, job.memory_limit_gib)
            if isinstance(log, (str, Path)):
                log = stack.enter_context(open(log, "ab"))
            process = _process(run, log, checking)
            # The measured worker imports its runtime while the empty worker is measured (both only import until
            # the package is loaded); its hard memory limit, which follows from the empty one, is set first.
            with SubmissionProcess(job.package, **process) as proc:
                with run.step("baseline"):
                    run.workers["baseline"] = (empty_workers or EmptyWorkers()).memory(**process)
                cap = _memory_cap(run, run.workers["baseline"][0])
                if cap is not None:
                    proc.limit_memory(cap)
                # statefulness's second worker imports its runtime while this one works; it loads the package
                # only once this one has ended
                fresh = None
                if checking and not run.one_pass:
                    fresh = stack.enter_context(SubmissionProcess(job.package, **process, memory_limit_bytes=cap))
                _measure_worker(run, proc, fresh, checking)
            record.s_res_bytes = max(record.s_res_load_bytes, record.s_res_after_inference_bytes)
            record.s_res_gib = record.s_res_bytes / GIB
            if fresh is not None:
                with run.step("statefulness", phase="statefulness"):
                    record.checks.append(_statefulness(run, fresh))
        except VllmEnvironmentMissing:
            raise  # the machine's setup, not the package: no verdict
        except Exception as exc:
            _fail(run, exc)
    record.wall_s = time.monotonic() - start
    record.provenance = collect_provenance(
        {
            "kind": job.kind,
            "source": job.source,
            "settings": job.settings.model_dump(),
            "secret": job.secret.public() if job.verifying else None,
        },
        {"submission": record.content_hash or ""},
    )
    return record
