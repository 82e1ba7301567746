"""``results/tables/serving_verified.{csv,md}``: Table 1 over server submissions, verified ones scored.

One row per submission: its verdict; ``D @ c`` (mean over the held-out final seeds, scored with the
frozen latency targets) with its bootstrap 95% interval, G (and interval), f, p90 TTFT and TPOT, the
per-token deadline rule's ``D_deadline`` and ``f_deadline`` (reported, never ranking) and the completed
timed requests only when every check passed (and a D only with enough requests, as in
the development table); otherwise the failing check and its cause. ``resources``: the CPUs (and GPUs) the
server's sandbox allowed, the CPU time it used and the devices ``d`` its D divides by (the charged ones, or
more where the sandbox could reach more: :mod:`infbench.serving.verify.resources`). ``probes`` says what the probes,
held-out questions and fidelity suspects were drawn with ("public demo" without an operator secret).
The reference engine's calibration baseline is the first row.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from infbench.config.model import ServingCore, UncertaintySettings
from infbench.sandbox.launch import isolation, marked
from infbench.serving import calibrate, replay_job
from infbench.serving.verify import resources
from infbench.serving.verify.record import VerificationRecord
from infbench.tables.io import write_table
from infbench.tables.serving import Measured, baseline, measured


class VerifiedRow(BaseModel):
    deployment: str
    system: str
    concurrency: int | None
    seeds: str
    verdict: str
    D: float | None
    D_at_c: str
    d_ci95_low: float | None
    d_ci95_high: float | None
    G: float | None
    g_ci95_low: float | None
    g_ci95_high: float | None
    f: float | None
    p90_ttft_s: float | None
    p90_tpot_ms: float | None
    D_deadline: float | None
    f_deadline: float | None
    completed_timed_requests: int | None
    sessions: int | None
    failed: int | None
    counts: str
    checks_passed: str
    probes: str
    isolation: str  # "bubblewrap <version>", or "UNSANDBOXED (<why>)" (sandbox.allow_unsandboxed)
    resources: str  # what the sandbox allowed and the devices D divides by, e.g. "1 of 2 CPUs (cpuset), d = 1"
    cause: str


NOT_SCORED = {k: None for k in Measured.model_fields if k not in ("D_at_c", "counts")}


def rows(
    serving: ServingCore, settings: UncertaintySettings, targets: calibrate.TargetsRecord, record_paths: list[str]
) -> list[VerifiedRow]:
    dep = serving.deployment.name
    base = baseline(serving, settings, targets)
    out = [
        VerifiedRow(
            **base.model_dump(),
            verdict="reference",
            checks_passed="",
            probes="",
            isolation="operator's",
            resources=f"{targets.cpus}, d = {serving.deployment.devices}",
            cause="",
        )
    ]
    for path in record_paths:
        rec = VerificationRecord.model_validate_json(Path(path).read_text())
        passed = f"{sum(c.passed for c in rec.checks)}/{len(rec.checks)}"
        seeds = ",".join(str(r.seed) for r in rec.replays)
        common = dict(
            deployment=dep,
            system=rec.submission,
            concurrency=rec.concurrency,
            seeds=seeds,
            checks_passed=passed,
            probes=f"probes: {rec.drawn_with}",
            isolation=isolation(rec.sandbox),
            resources=resources.describe(serving.deployment, rec.sandbox),
        )
        if not rec.verified:
            out.append(
                VerifiedRow(
                    **common,
                    **NOT_SCORED,
                    verdict=marked(f"failed: {rec.failed_check}", rec.sandbox),
                    D_at_c=f"not scored (fails {rec.failed_check})",
                    counts="",
                    cause=" ".join((rec.failure or "").split(":\n")[0].split())[:300],
                )
            )
            continue
        # D divides by the devices the sandbox allowed (never fewer than charged)
        devices = resources.devices_scored(serving.deployment, rec.sandbox)
        m = measured(
            serving.model_copy(update={"deployment": serving.deployment.model_copy(update={"devices": devices})}),
            settings,
            [r.records for r in rec.replays],
            rec.concurrency,
            targets.targets,
            f"verified/{rec.submission}",
        )
        out.append(VerifiedRow(**common, **m.model_dump(), verdict=marked("verified", rec.sandbox), cause=""))
    return out


def write(
    serving: ServingCore,
    uncertainty: UncertaintySettings,
    targets_path: str,
    sessions_path: str,
    record_paths: list[str],
    *,
    csv_path: str,
    md_path: str,
    provenance_path: str,
) -> list[VerifiedRow]:
    targets = calibrate.read_targets(targets_path, serving, sessions_path)
    table = rows(serving, uncertainty, targets, list(record_paths))
    write_table(
        table,
        csv_path=csv_path,
        md_path=md_path,
        provenance_path=provenance_path,
        params={
            "table": "serving_verified",
            "seeds": "final",
            "tau_first_s": targets.targets.tau_first_s,
            "tau_token_s": targets.targets.tau_token_s,
        },
        config={"serving": serving.model_dump(mode="json"), "uncertainty": uncertainty.model_dump(mode="json")},
        inputs=replay_job.input_hashes(targets_path, sessions_path, *record_paths),
    )
    return table
