"""Latency calibration (PROTOCOL B3): frozen TTFT/TPOT targets and the reference baseline.

The reference engine is replayed at every configured concurrency (first
calibration seed); the concurrency with the highest *gross* value G is chosen
and replayed on every calibration seed (the first run is reused).
``tau_first = max_j p90 TTFT_j``, ``tau_token = max_j p90 TPOT_j``; the baseline
is the mean over seeds of p90 TTFT, p90 TPOT and D (scored with those targets).
The file records a key of everything the targets depend on (deployment,
workload, reference engine, replay settings); scoring refuses targets whose key
differs from the current config, so a change forces recalibration.

Each further reference engine of ``serving.calibration.baselines`` (the paper's vLLM beside SGLang) is
calibrated the same way, at its own concurrency of best gross value, and scored with the frozen targets
(:func:`baseline`): the paper reports each engine's D @ c.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from infbench import atomic, provenance
from infbench.config.model import ServingCore
from infbench.errors import InfbenchError, InputFileError
from infbench.hashing import sha256_text
from infbench.serving import replay_job, servers, workload
from infbench.serving.value import Targets


class SeedRun(BaseModel):
    seed: int
    records: str
    p90_ttft_s: float
    p90_tpot_s: float
    G: float
    D: float | None = None


class TargetsRecord(BaseModel):
    key: str
    deployment: str
    reference: str
    concurrency_scan: dict[int, float]
    concurrency: int
    cpus: str  # what the engine ran on, e.g. "1 of 2 CPUs (affinity)"
    targets: Targets
    runs: list[SeedRun]
    baseline_p90_ttft_s: float
    baseline_p90_tpot_s: float
    baseline_D: float
    provenance: provenance.Provenance


def key(serving: ServingCore, workload_sha: str) -> str:
    """What the targets depend on: deployment, workload and its prompts' settings, reference spec, replay and
    calibration settings."""
    dumped = serving.model_dump(mode="json")
    parts = {k: dumped[k] for k in ("deployment", "replay", "calibration")}
    del parts["calibration"]["baselines"]  # scored with the targets, never part of them
    parts["prompts"] = {k: dumped["workload"][k] for k in ("token_id_range", "marker_tokens", "far_context")}
    parts["reference_spec"] = dumped["servers"][serving.calibration.reference]
    parts["calibration_seeds"] = dumped["seeds"]["calibration"]
    parts["workload_sha256"] = workload_sha
    return sha256_text(json.dumps(parts, sort_keys=True))


def _seed_run(summary: replay_job.RunSummary) -> SeedRun:
    s = summary.score
    if s.p90_ttft_s is None or s.p90_tpot_s is None:
        raise InfbenchError(
            f"reference {summary.server} completed no request in the window at "
            f"c={summary.concurrency}, seed {summary.seed} ({s.failed} failed): "
            f"lengthen serving.replay.window_s or shorten the workload; records {summary.records}"
        )
    if not s.valid:
        raise InfbenchError(
            f"reference {summary.server} at c={summary.concurrency}, seed {summary.seed}: the run is "
            f"invalid, {s.invalid_reason}; records {summary.records}"
        )
    return SeedRun(seed=summary.seed, records=summary.records, p90_ttft_s=s.p90_ttft_s, p90_tpot_s=s.p90_tpot_s, G=s.G)


class CalibrationJob(BaseModel):
    """What one ``serving_calibrate`` or ``serving_baseline`` job is given: the engine it scans, its inputs and
    where its outputs go."""

    model_config = ConfigDict(frozen=True)

    serving: ServingCore
    engine: str  # serving.calibration.reference, or a further engine of serving.calibration.baselines
    sessions: str  # the workload's sessions
    model_dir: str  # the source checkpoint (transformers)
    gguf: str  # the source as GGUF ("" when the deployment has none)
    runs_dir: str  # the scan's request records, one parquet file per concurrency and seed
    record: str  # the targets record (reference) or the baseline record (JSON)
    server_log: str
    targets: str = ""  # a further engine's: the reference's frozen targets


def _scan(
    job: CalibrationJob, inputs: dict[str, str], targets: Targets | None = None
) -> tuple[dict[int, replay_job.RunSummary], int, list[SeedRun]]:
    """``job.engine`` replayed at every calibration concurrency on the first calibration seed, then at the one of
    best gross value G (the lower on a tie) on the other seeds: the scan, that concurrency and its runs."""
    serving = job.serving
    sessions = workload.load(job.sessions)
    seeds = serving.seeds.calibration
    out = Path(job.runs_dir)
    out.mkdir(parents=True, exist_ok=True)

    def one(base: str, c: int, seed: int) -> replay_job.RunSummary:
        return replay_job.replay_once(
            serving, sessions, job.engine, base, c, seed, str(out / f"c{c}_seed{seed}.parquet"), None, inputs, targets
        )

    launch = servers.LaunchVars.for_serving(serving, job.model_dir, job.gguf)
    with servers.launched(
        job.engine, serving.servers[job.engine], launch, job.server_log, servers.charged_cpus(serving.deployment)
    ) as base:
        scan = {c: one(base, c, seeds[0]) for c in serving.calibration.concurrencies}
        best = max(scan, key=lambda c: (scan[c].score.G, -c))
        seed_runs = [scan[best]] + [one(base, best, s) for s in seeds[1:]]
    return scan, best, [_seed_run(r) for r in seed_runs]


def _scored(
    serving: ServingCore,
    scan: dict[int, replay_job.RunSummary],
    best: int,
    per_seed: list[SeedRun],
    targets: Targets,
) -> dict:
    """What the reference's record and a further engine's share: the scan, the chosen concurrency, its runs each
    scored with ``targets`` (D) and their means over seeds."""
    for r in per_seed:
        r.D = replay_job.rescore(r.records, serving, targets).D
    return dict(
        concurrency_scan={c: r.score.G for c, r in scan.items()},
        cpus=servers.describe_cpus(servers.charged_cpus(serving.deployment)),
        concurrency=best,
        runs=per_seed,
        baseline_p90_ttft_s=statistics.fmean(r.p90_ttft_s for r in per_seed),
        baseline_p90_tpot_s=statistics.fmean(r.p90_tpot_s for r in per_seed),
        baseline_D=statistics.fmean(r.D for r in per_seed),
    )


def calibrate(job: CalibrationJob) -> TargetsRecord:
    """Scan the reference engine, freeze the targets from its runs and write its record."""
    serving = job.serving
    if job.engine != serving.calibration.reference:
        raise InfbenchError(f"calibrate: {job.engine} is not the reference ({serving.calibration.reference})")
    inputs = replay_job.input_hashes(job.sessions)
    scan, best, per_seed = _scan(job, inputs)
    targets = Targets(tau_first_s=max(r.p90_ttft_s for r in per_seed), tau_token_s=max(r.p90_tpot_s for r in per_seed))
    record = TargetsRecord(
        key=key(serving, inputs[job.sessions]),
        deployment=serving.deployment.name,
        reference=job.engine,
        targets=targets,
        provenance=provenance.collect({"serving": serving.model_dump(mode="json")}, inputs),
        **_scored(serving, scan, best, per_seed, targets),
    )
    atomic.write_json(job.record, record.model_dump(mode="json"))
    return record


class BaselineRecord(BaseModel):
    """A further reference engine at its own concurrency of best gross value, scored with the frozen targets."""

    engine: str
    deployment: str
    targets_key: str
    concurrency_scan: dict[int, float]
    cpus: str  # what the engine ran on, e.g. "1 of 2 CPUs (affinity)"
    concurrency: int
    runs: list[SeedRun]
    baseline_p90_ttft_s: float
    baseline_p90_tpot_s: float
    baseline_D: float
    provenance: provenance.Provenance


def baseline(job: CalibrationJob) -> BaselineRecord:
    """Calibrate a further engine as the reference is calibrated (its own c of best G) and score its runs with the
    reference's frozen targets (``job.targets``)."""
    serving = job.serving
    frozen = read_targets(job.targets, serving, job.sessions)
    inputs = replay_job.input_hashes(job.sessions, job.targets)
    scan, best, per_seed = _scan(job, inputs, frozen.targets)
    record = BaselineRecord(
        engine=job.engine,
        deployment=serving.deployment.name,
        targets_key=frozen.key,
        provenance=provenance.collect({"serving": serving.model_dump(mode="json"), "engine": job.engine}, inputs),
        **_scored(serving, scan, best, per_seed, frozen.targets),
    )
    atomic.write_json(job.record, record.model_dump(mode="json"))
    return record


def read_baseline(path: str, targets: TargetsRecord) -> BaselineRecord:
    """A further reference engine's baseline, refused if it was scored with other targets."""
    record = BaselineRecord.model_validate_json(Path(path).read_text())
    if record.targets_key != targets.key:
        raise InputFileError(path, "scored with other latency targets; rerun it (rule serving_baseline)")
    return record


def read_targets(path: str, serving: ServingCore, sessions_path: str) -> TargetsRecord:
    """The frozen targets, refused if the deployment, workload or reference changed since calibration."""
    record = TargetsRecord.model_validate_json(Path(path).read_text())
    want = key(serving, replay_job.input_hashes(sessions_path)[sessions_path])
    if record.key != want:
        raise InputFileError(
            path,
            "targets were calibrated for another deployment, workload or reference "
            "engine; recalibrate (rule serving_calibrate)",
        )
    return record
