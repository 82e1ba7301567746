"""``results/serving/table1.{csv,md}``: ServerBench Table 1 layout (system, D @ c, p90 TTFT, p90 TPOT)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infbench.serving import calibrate, runs
from infbench.serving.value import Score
from infbench.tables.io import write_table


class ServingRow(BaseModel):
    deployment: str
    system: str
    concurrency: int
    seeds: str
    D: float
    D_at_c: str
    G: float
    f: float | None
    p90_ttft_s: float | None
    p90_tpot_ms: float | None
    completed: int
    failed: int


def mean_present(xs):
    """Mean of the values that are not None (None if there are none)."""
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def d_at_c(D: float, c: int, scores: list[Score]) -> str:
    """``D @ c``, and why if a replay was invalid (its D counts as 0 in the mean)."""
    invalid = [x for x in scores if not x.valid]
    note = f" ({len(invalid)} of {len(scores)} replays invalid: {invalid[0].invalid_reason})" if invalid else ""
    return f"{D:.3g} @{c}{note}"


def rows(serving: dict[str, Any], targets: calibrate.TargetsRecord, summaries: list[str]) -> list[ServingRow]:
    dep = serving["deployment"]["name"]
    groups: dict[tuple[str, int], list[runs.RunSummary]] = {}
    for path in summaries:
        s = runs.RunSummary.model_validate_json(Path(path).read_text())
        groups.setdefault((s.server, s.concurrency), []).append(s)
    out = [ServingRow(
        deployment=dep, system=f"{targets.reference} (calibration baseline)", concurrency=targets.concurrency,
        seeds=",".join(str(r.seed) for r in targets.runs), D=targets.baseline_D,
        D_at_c=f"{targets.baseline_D:.3g} @{targets.concurrency}", G=statistics.fmean(r.G for r in targets.runs),
        f=mean_present(r.D / r.G if r.D is not None and r.G > 0 else None for r in targets.runs),
        p90_ttft_s=targets.baseline_p90_ttft_s, p90_tpot_ms=1e3 * targets.baseline_p90_tpot_s,
        completed=0, failed=0)]
    for (server, c), group in sorted(groups.items()):
        scores = [runs.rescore(s.records, serving, targets.targets) for s in group]
        D = statistics.fmean(x.D for x in scores)
        tpot = mean_present(x.p90_tpot_s for x in scores)
        out.append(ServingRow(
            deployment=dep, system=server, concurrency=c, seeds=",".join(str(s.seed) for s in group), D=D,
            D_at_c=d_at_c(D, c, scores), G=statistics.fmean(x.G for x in scores), f=mean_present(x.f for x in scores),
            p90_ttft_s=mean_present(x.p90_ttft_s for x in scores), p90_tpot_ms=None if tpot is None else 1e3 * tpot,
            completed=sum(x.completed for x in scores), failed=sum(x.failed for x in scores)))
    return out


def write(serving: dict[str, Any], targets_path: str, sessions_path: str, summaries: list[str], *,
          csv_path: str, md_path: str, provenance_path: str) -> list[ServingRow]:
    targets = calibrate.read_targets(targets_path, serving, sessions_path)
    table = rows(serving, targets, summaries)
    write_table(table, csv_path=csv_path, md_path=md_path, provenance_path=provenance_path,
                params={"table": "serving", "tau_first_s": targets.targets.tau_first_s,
                        "tau_token_s": targets.targets.tau_token_s},
                config={"serving": serving}, inputs=runs.input_hashes(targets_path, sessions_path, *summaries))
    return table
