"""``results/tables/serving_verified.{csv,md}``: Table 1 over server submissions, verified ones scored.

One row per submission: its verdict; ``D @ c`` (mean over the held-out final seeds, scored with the
frozen latency targets), G, f, p90 TTFT and TPOT only when every check passed; otherwise the failing
check and its cause. The reference engine's calibration baseline is the first row.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infbench.serving import calibrate, runs
from infbench.serving.verify.verdict import VerificationRecord
from infbench.tables.io import write_table
from infbench.tables.serving import d_at_c, mean_present


class VerifiedRow(BaseModel):
    deployment: str
    system: str
    concurrency: int | None
    seeds: str
    verdict: str
    D: float | None
    D_at_c: str
    G: float | None
    f: float | None
    p90_ttft_s: float | None
    p90_tpot_ms: float | None
    completed: int | None
    failed: int | None
    checks_passed: str
    cause: str


def rows(serving: dict[str, Any], targets: calibrate.TargetsRecord, record_paths: list[str]) -> list[VerifiedRow]:
    dep = serving["deployment"]["name"]
    out = [VerifiedRow(
        deployment=dep, system=f"{targets.reference} (calibration baseline)", concurrency=targets.concurrency,
        seeds=",".join(str(r.seed) for r in targets.runs), verdict="reference", D=targets.baseline_D,
        D_at_c=f"{targets.baseline_D:.3g} @{targets.concurrency}", G=statistics.fmean(r.G for r in targets.runs),
        f=None, p90_ttft_s=targets.baseline_p90_ttft_s, p90_tpot_ms=1e3 * targets.baseline_p90_tpot_s,
        completed=None, failed=None, checks_passed="", cause="")]
    for path in record_paths:
        rec = VerificationRecord.model_validate_json(Path(path).read_text())
        passed = f"{sum(c.passed for c in rec.checks)}/{len(rec.checks)}"
        seeds = ",".join(str(r.seed) for r in rec.replays)
        if not rec.verified:
            out.append(VerifiedRow(
                deployment=dep, system=rec.submission, concurrency=rec.concurrency, seeds=seeds,
                verdict=f"failed: {rec.failing_check}", D=None, D_at_c=f"not scored (fails {rec.failing_check})",
                G=None, f=None, p90_ttft_s=None, p90_tpot_ms=None, completed=None, failed=None,
                checks_passed=passed, cause=" ".join((rec.cause or "").split(":\n")[0].split())[:300]))
            continue
        scores = [runs.rescore(r.records, serving, targets.targets) for r in rec.replays]
        D = statistics.fmean(x.D for x in scores)
        tpot = mean_present(x.p90_tpot_s for x in scores)
        out.append(VerifiedRow(
            deployment=dep, system=rec.submission, concurrency=rec.concurrency, seeds=seeds, verdict="verified",
            D=D, D_at_c=d_at_c(D, rec.concurrency, scores), G=statistics.fmean(x.G for x in scores),
            f=mean_present(x.f for x in scores), p90_ttft_s=mean_present(x.p90_ttft_s for x in scores),
            p90_tpot_ms=None if tpot is None else 1e3 * tpot, completed=sum(x.completed for x in scores),
            failed=sum(x.failed for x in scores), checks_passed=passed, cause=""))
    return out


def write(serving: dict[str, Any], targets_path: str, sessions_path: str, record_paths: list[str], *,
          csv_path: str, md_path: str, provenance_path: str) -> list[VerifiedRow]:
    targets = calibrate.read_targets(targets_path, serving, sessions_path)
    table = rows(serving, targets, list(record_paths))
    write_table(table, csv_path=csv_path, md_path=md_path, provenance_path=provenance_path,
                params={"table": "serving_verified", "tau_first_s": targets.targets.tau_first_s,
                        "tau_token_s": targets.targets.tau_token_s},
                config={"serving": serving}, inputs=runs.input_hashes(targets_path, sessions_path, *record_paths))
    return table
