"""Pipeline glue for final verification and the search-time reward.

``measure_for_pipeline``: one measurement per (source, candidate) on the
verification set, with the operator secret placing the integrity probes;
(the verdict under each task's storage limit is :func:`infbench.compression.records.judge_for_pipeline`);
``reward``: the search-time evaluator that ``infbench reward`` runs on the search
set only (nothing of the verification set, the answers reference or the secret is
read) and appends to a JSONL log.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from infbench import atomic
from infbench.compression.accuracy import GateJob
from infbench.compression.client import EmptyWorkers
from infbench.compression.measure import EvaluationSettings, LikelihoodSet, MeasureJob, measure
from infbench.compression.records import EvaluationRecord, verdict
from infbench.compression.tasks import Task
from infbench.config.model import SandboxSettings, VerificationSettings
from infbench.layout import Layout
from infbench.operator_secret import OperatorSecret
from infbench.sources import read_record


def measure_for_pipeline(
    package: str,
    source: str,
    *,
    source_checkpoint: str,
    source_record: str,
    scored: LikelihoodSet,
    settings: VerificationSettings,
    sandbox: SandboxSettings,
    threads: int,
    out: str,
    secret: OperatorSecret,
    sample_temperature: float,
    gate: GateJob | None,
    memory_limit_gib: float | None = None,
    worker_log=None,
) -> EvaluationRecord:
    record = read_record(source_record)
    job = MeasureJob(
        kind="verification",
        package=Path(package),
        source=source,
        source_checkpoint=source_checkpoint,
        n_params=record.n_params,
        vocab_size=record.vocab_size,
        scored=scored,
        settings=EvaluationSettings.for_job(settings, sandbox, threads),
        secret=secret,
        sample_temperature=sample_temperature,
        memory_limit_gib=memory_limit_gib,
        gate=gate,
    )
    measured = measure(job, log=worker_log)
    atomic.write_json(out, measured.model_dump(mode="json"))
    return measured


def search_set(results: Layout, source: str) -> LikelihoodSet:
    """The files of ``source``'s search set in the pipeline's results tree (the reward is scored on it)."""
    return LikelihoodSet(
        continuations=results.continuations(source, "search"),
        reference_scores=results.reference_scores(source, "search"),
        reference_top=results.reference_top(source, "search"),
    )


def reward(
    package: str,
    task: Task,
    *,
    results: Layout,
    settings: VerificationSettings,
    sandbox: SandboxSettings,
    threads: int,
    log_path: Path,
    worker_log: str | None = None,
    empty_workers: EmptyWorkers | None = None,
) -> EvaluationRecord:
    """Search-time reward ``10 F_s`` (0 unless it runs and both storage limits hold), logged as JSONL;
    ``results``: the pipeline's results tree, whose search set only it reads; ``empty_workers``: kept across the
    calls of one search, so that its runtime's empty worker is measured once (:class:`EmptyWorkers`)."""
    record = read_record(results.source_record(task.source))
    job = MeasureJob(
        kind="reward",
        package=Path(package),
        source=task.source,
        source_checkpoint=results.checkpoint(task.source),
        n_params=record.n_params,
        vocab_size=record.vocab_size,
        scored=search_set(results, task.source),
        settings=EvaluationSettings.for_job(settings, sandbox, threads),
        memory_limit_gib=task.limit_gib,
    )
    judged = verdict(measure(job, log=worker_log, empty_workers=empty_workers), task)
    judged.finished_at = datetime.now(UTC)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        log.write(json.dumps(judged.model_dump(mode="json"), sort_keys=True) + "\n")
    return judged
