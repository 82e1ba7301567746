"""The runs' tables (CSV, Markdown, provenance): ingestion status and every analysis; their figures
are :mod:`infbench.plots.runs`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.compression.records import EvaluationRecord
from infbench.hashing import sha256_file
from infbench.runs import compression_analysis as ca
from infbench.runs import cost_analysis as cost
from infbench.runs import serving_analysis as sa
from infbench.runs.outputs import PLOTTED
from infbench.runs.schema import RunRecord, RunStatus


def _table(rows: list[BaseModel], model: type[BaseModel], paths: dict[str, str], params: dict, inputs: dict) -> None:
    frame = pd.DataFrame([r.model_dump() for r in rows], columns=list(model.model_fields))
    atomic.write_text(paths["csv"], frame.to_csv(index=False, float_format="%.6g", lineterminator="\n"))
    shown = frame.astype(object).where(frame.notna(), "")  # an empty cell, not "nan", for a missing value
    md = (
        shown.to_markdown(index=False, floatfmt=".6g")
        if rows
        else "| " + " | ".join(frame.columns) + " |\n" + "|" + "---|" * len(frame.columns) + "\n\n(no rows)"
    )
    atomic.write_text(paths["md"], md + "\n")
    atomic.write_json(paths["provenance"], provenance.collect(params, inputs).model_dump(mode="json"))


class StatusRow(BaseModel):
    run: str
    ingested: bool
    reason: str | None
    agent: str | None  # model, scaffold, effort
    track: str | None
    task: str | None
    candidate: str | None
    events: int


def _status_row(s: RunStatus) -> StatusRow:
    agent = None if s.agent is None else ", ".join(v for v in (s.agent.model, s.agent.scaffold, s.agent.effort) if v)
    return StatusRow(**s.model_dump(exclude={"agent"}), agent=agent)


def write(
    statuses: list[str],
    records: list[str],
    verified: dict[str, str],
    *,
    tables: dict[str, dict[str, str]],
    settings: dict,
) -> dict[str, list[BaseModel]]:
    """``tables[name]`` = {csv, md, provenance}; ``verified`` = run -> the verification record of its
    final submission on its own task. Returns what each figure of :data:`PLOTTED` draws: its table's
    rows (the concurrency paths: their points)."""
    status = [RunStatus.model_validate_json(Path(p).read_text()) for p in statuses]
    ingested = {s.run for s in status if s.ingested}
    recs = [RunRecord.model_validate(v) for v in (json.loads(Path(p).read_text()) for p in records) if v]
    recs = [r for r in recs if r.run in ingested]  # a run not ingested has an empty record
    comp = [r for r in recs if r.spec.track == "compression"]
    serv = [r for r in recs if r.spec.track == "serving"]
    tol, band, gap = settings["outcome_tolerance"], settings["size_band_gib"], settings["idle_gap_minutes"] * 60
    paths, points = sa.concurrency_paths(serv, gap)
    costs = cost.cost(recs, settings["prices"])
    checked = {run: EvaluationRecord.model_validate_json(Path(p).read_text()) for run, p in verified.items()}
    results = {
        "status": ([_status_row(s) for s in status], StatusRow),
        "best_so_far": (ca.best_so_far(comp), ca.BestSoFarRow),
        "outcomes": (ca.outcomes(comp, tol), ca.OutcomeRow),
        "ranking_pairs": (ca.ranking_pairs(comp, tol), ca.RankingPairRow),
        "revisions": (ca.revisions(comp, band), ca.RevisionRow),
        "stopping": (ca.stopping(comp), ca.StoppingRow),
        "concurrency_paths": (paths, sa.PathRow),
        "first_usable_replay": (sa.first_usable(serv, gap), sa.FirstUsableRow),
        "matched_seeds": (sa.matched_seeds(serv), sa.MatchedSeedRow),
        "cost": (costs, cost.CostRow),
        "frontier": (cost.frontier(costs, checked), cost.FrontierRow),
    }
    inputs = {p: sha256_file(p) for p in [*statuses, *records, *verified.values()]}
    for name, (rows, model) in results.items():
        _table(rows, model, tables[name], {"table": f"runs/{name}", "settings": settings}, inputs)
    return {name: results[name][0] for name in PLOTTED} | {"concurrency_paths": points}
