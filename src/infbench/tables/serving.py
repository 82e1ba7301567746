"""``results/tables/serving.{csv,md}``: the development table in ServerBench Table 1 layout.

The configured ``serving.systems`` replayed on the *development* seeds (the final seeds are held out
for verification, ``results/tables/serving_verified.*``). Per system: ``D @ c`` (mean over the seeds,
scored with the frozen latency targets) with its bootstrap 95% interval over sessions
(:mod:`infbench.serving.uncertainty`), G with its interval, f, p90 TTFT and TPOT, the per-token deadline
rule's D and qualified share (``D_deadline``, ``f_deadline``: reported, never ranking;
:mod:`infbench.serving.value`), and the completed timed requests. A row with fewer completed timed requests than
``serving.uncertainty.min_completed_requests`` shows no D, and says so; a system whose stream carried
no token ids (counted by usage) is marked "unverified counts". The first row is the calibration baseline, then
one row per further reference engine (``serving.calibration.baselines``) at its own concurrency.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from infbench.config.model import ServingCore, UncertaintySettings
from infbench.serving import calibrate, replay_job
from infbench.serving.uncertainty import Spread, spread
from infbench.serving.value import Score, Targets, completed_mask
from infbench.tables.io import write_table


class Measured(BaseModel):
    """The scored columns of a row (shared with the verified table)."""

    D: float | None
    D_at_c: str
    d_ci95_low: float | None
    d_ci95_high: float | None
    G: float
    g_ci95_low: float
    g_ci95_high: float
    f: float | None
    p90_ttft_s: float | None
    p90_tpot_ms: float | None
    D_deadline: float | None
    f_deadline: float | None
    completed_timed_requests: int
    sessions: int
    failed: int
    counts: str


class System(BaseModel):
    deployment: str
    system: str
    concurrency: int
    seeds: str


class ServingRow(Measured, System):  # System's columns first
    pass


def mean_present(xs):
    """Mean of the values that are not None (None if there are none)."""
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def d_at_c(D: float, c: int, scores: list[Score], s: Spread, minimum: int) -> str:
    """``D [low, high] @ c``; "too few" instead of a D under the minimum; why if a replay was invalid."""
    invalid = [x for x in scores if not x.valid]
    note = f" ({len(invalid)} of {len(scores)} replays invalid: {invalid[0].invalid_reason})" if invalid else ""
    interval = f"{D:.3g} [{s.d_ci95_low:.3g}, {s.d_ci95_high:.3g}]"
    if s.completed_timed_requests < minimum:
        return (
            f"too few requests: {s.completed_timed_requests} completed timed requests < {minimum} "
            f"(D {interval}) @{c}{note}"
        )
    return f"{interval} @{c}{note}"


def counts_note(frames: list[pd.DataFrame]) -> str:
    """How output tokens were counted: by streamed token ids, or (some requests) by usage alone."""
    done = pd.concat([f[completed_mask(f)] for f in frames], ignore_index=True)
    unverified = int((~done["counts_from_token_ids"].astype(bool)).sum()) if len(done) else 0
    if unverified:
        return f"unverified counts ({unverified} of {len(done)} completed requests without token ids)"
    return "token ids"


def measured(
    serving: ServingCore, settings: UncertaintySettings, record_paths: list[str], c: int, targets: Targets, key: str
) -> Measured:
    """The scored columns of replays at concurrency ``c`` (one records parquet per seed)."""
    frames = [replay_job.read_records(p) for p in record_paths]
    scores = [replay_job.score_frame(f, serving, targets) for f in frames]
    s = spread(frames, scores, serving.deployment, targets, settings, key)
    D = statistics.fmean(x.D for x in scores)
    enough = s.completed_timed_requests >= settings.min_completed_requests
    counts = counts_note(frames)
    tpot = mean_present(x.p90_tpot_s for x in scores)
    return Measured(
        D=D if enough else None,
        D_at_c=d_at_c(D, c, scores, s, settings.min_completed_requests)
        + (" (unverified counts)" if counts != "token ids" else ""),
        d_ci95_low=s.d_ci95_low,
        d_ci95_high=s.d_ci95_high,
        G=statistics.fmean(x.G for x in scores),
        g_ci95_low=s.g_ci95_low,
        g_ci95_high=s.g_ci95_high,
        f=mean_present(x.f for x in scores),
        p90_ttft_s=mean_present(x.p90_ttft_s for x in scores),
        p90_tpot_ms=None if tpot is None else 1e3 * tpot,
        D_deadline=mean_present(x.D_deadline for x in scores) if enough else None,
        f_deadline=mean_present(x.f_deadline for x in scores),
        completed_timed_requests=s.completed_timed_requests,
        sessions=s.sessions,
        failed=sum(x.failed for x in scores),
        counts=counts,
    )


def baseline(
    serving: ServingCore,
    settings: UncertaintySettings,
    targets: calibrate.TargetsRecord,
    engine: calibrate.BaselineRecord | None = None,
) -> ServingRow:
    """A calibration baseline: the reference engine (or a further reference ``engine``) at its chosen c over the
    calibration seeds, scored with the frozen targets."""
    name, c, runs = (
        (targets.reference, targets.concurrency, targets.runs)
        if engine is None
        else (engine.engine, engine.concurrency, engine.runs)
    )
    m = measured(serving, settings, [r.records for r in runs], c, targets.targets, f"baseline/{name}")
    return ServingRow(
        deployment=serving.deployment.name,
        system=f"{name} (calibration baseline)",
        concurrency=c,
        seeds=",".join(str(r.seed) for r in runs),
        **m.model_dump(),
    )


def rows(
    serving: ServingCore,
    settings: UncertaintySettings,
    targets: calibrate.TargetsRecord,
    summaries: list[str],
    baselines: list[str] = (),
) -> list[ServingRow]:
    dep = serving.deployment.name
    groups: dict[tuple[str, int], list[replay_job.RunSummary]] = {}
    for path in summaries:
        s = replay_job.RunSummary.model_validate_json(Path(path).read_text())
        groups.setdefault((s.server, s.concurrency), []).append(s)
    out = [baseline(serving, settings, targets)]
    out += [baseline(serving, settings, targets, calibrate.read_baseline(p, targets)) for p in baselines]
    for (server, c), group in sorted(groups.items()):
        m = measured(serving, settings, [s.records for s in group], c, targets.targets, f"{server}@{c}")
        out.append(
            ServingRow(
                deployment=dep,
                system=server,
                concurrency=c,
                seeds=",".join(str(s.seed) for s in group),
                **m.model_dump(),
            )
        )
    return out


def write(
    serving: ServingCore,
    uncertainty: UncertaintySettings,
    targets_path: str,
    sessions_path: str,
    summaries: list[str],
    *,
    baselines: list[str] = (),
    csv_path: str,
    md_path: str,
    provenance_path: str,
) -> list[ServingRow]:
    targets = calibrate.read_targets(targets_path, serving, sessions_path)
    table = rows(serving, uncertainty, targets, summaries, baselines)
    write_table(
        table,
        csv_path=csv_path,
        md_path=md_path,
        provenance_path=provenance_path,
        params={
            "table": "serving",
            "seeds": "development",
            "tau_first_s": targets.targets.tau_first_s,
            "tau_token_s": targets.targets.tau_token_s,
        },
        config={"serving": serving.model_dump(mode="json"), "uncertainty": uncertainty.model_dump(mode="json")},
        inputs=replay_job.input_hashes(targets_path, sessions_path, *baselines, *summaries),
    )
    return table
