"""The runs' tables (CSV, Markdown, provenance) and plots: ingestion status and every analysis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.compression.evaluation import EvaluationRecord
from infbench.hashing import sha256_file
from infbench.runs import compression_analysis as ca, cost_analysis as cost, serving_analysis as sa
from infbench.runs.outputs import ANALYSES, PLOTTED
from infbench.runs.schema import RunRecord, RunStatus



def _table(rows: list[BaseModel], model: type[BaseModel], paths: dict[str, str], params: dict, inputs: dict) -> None:
    frame = pd.DataFrame([r.model_dump() for r in rows], columns=list(model.model_fields))
    atomic.write_text(paths["csv"], frame.to_csv(index=False, float_format="%.6g", lineterminator="\n"))
    shown = frame.astype(object).where(frame.notna(), "")  # an empty cell, not "nan", for a missing value
    md = shown.to_markdown(index=False, floatfmt=".6g") if rows else "| " + " | ".join(frame.columns) + " |\n" \
        + "|" + "---|" * len(frame.columns) + "\n\n(no rows)"
    atomic.write_text(paths["md"], md + "\n")
    atomic.write_json(paths["provenance"], provenance.collect(params, inputs).model_dump(mode="json"))


def _figure(path: str, draw: Callable, rows: list, empty: str, size=(6.5, 4)) -> None:
    fig, ax = plt.subplots(figsize=size)
    if rows:
        draw(ax, rows)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def _by_run(rows):
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r.run, []).append(r)
    return out.items()


def _best(ax, rows):
    for run, rs in _by_run(rows):
        pts = [(r.t_hours, r.best_ppl) for r in rs if r.best_ppl is not None]
        if pts:
            ax.step(*zip(*pts), where="post", marker="o", label=run)
    ax.set_xlabel("design time (hours since start)")
    ax.set_ylabel("best-so-far PPL (search set, feasible calls)")


def _outcomes(ax, rows):
    labels = [f"{r.run}\nQ{r.quarter}" for r in rows]
    bottom = [0] * len(rows)
    for field, name in [("new_best", "new best"), ("same_as_best", "same as best"), ("worse", "worse")]:
        vals = [getattr(r, field) for r in rows]
        ax.bar(labels, vals, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("reward evaluations")
    ax.tick_params(axis="x", labelsize=6)


def _pairs(ax, rows):
    counts = pd.DataFrame([r.model_dump() for r in rows]).groupby(["run", "verdict"]).size().unstack(fill_value=0)
    counts.plot.bar(ax=ax, stacked=True)
    ax.set_ylabel("local-metric ranking pairs")


def _revisions(ax, rows):
    bands = sorted({r.size_band for r in rows})
    for i, band in enumerate(bands):
        ys = [r.effect_pct for r in rows if r.size_band == band]
        ax.scatter([i] * len(ys), ys, label=band)
    ax.set_xticks(range(len(bands)), bands)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_ylabel("revision effect 100 (E_after/E_before - 1) [%]")


def _stopping(ax, rows):
    for i, r in enumerate(rows):
        if r.last_weight_change_h is not None:
            ax.scatter(r.last_weight_change_h, i, marker="s", color="C0", label="last weight change" if i == 0 else None)
        if r.first_completion_h is not None:
            ax.scatter(r.first_completion_h, i, marker="x", color="C3", label="first completion" if i == 0 else None)
    ax.set_yticks(range(len(rows)), [r.run for r in rows])
    ax.set_xlabel("hours since start")


def _paths(points):
    def draw(ax, rows):
        for run, ps in _by_run(points):
            ax.step([p.active_h for p in ps], [p.concurrency for p in ps], where="post", marker="o",
                    label=f"{run} ({next(r.classification for r in rows if r.run == run)})")
        ax.set_xlabel("agent-active hours")
        ax.set_ylabel("concurrency")
    return draw


def _first_usable(ax, rows):
    ax.barh([r.run for r in rows], [r.first_usable_h or 0 for r in rows])
    ax.set_xlabel("hours to first usable replay (0: none)")


def _matched(ax, rows):
    labels = [f"{r.run} {r.before[:6]}>{r.after[:6]} s{r.seed}" for r in rows]
    x = range(len(rows))
    for k, field in enumerate(["d_ratio", "g_ratio", "f_ratio"]):
        ax.bar([i + 0.27 * k for i in x], [getattr(r, field) or 0 for r in rows], width=0.27, label=field)
    ax.set_xticks(list(x), labels, fontsize=6)
    ax.axhline(1, color="grey", lw=0.5)


def _cost(ax, rows):
    ax.barh([r.run for r in rows], [r.cost_usd for r in rows])
    for i, r in enumerate(rows):
        ax.annotate(f"{(r.input_tokens + r.cached_tokens + r.cache_write_tokens + r.output_tokens) / 1e6:.2f} Mtok",
                    (r.cost_usd, i), fontsize=7)
    ax.set_xlabel("estimated API cost (USD)")


def _frontier(ax, rows):
    ax.remove()
    fig = plt.gcf()
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for r in rows:
        if r.bits_per_param is not None and r.accuracy_rel is not None:
            left.scatter(r.bits_per_param, r.accuracy_rel)
            left.annotate(r.run, (r.bits_per_param, r.accuracy_rel), fontsize=7)
        if r.ppl_rank is not None:
            right.scatter(r.cost_usd, r.ppl_rank)
            right.annotate(r.run, (r.cost_usd, r.ppl_rank), fontsize=7)
    left.set_xlabel("package bits per parameter")
    left.set_ylabel("accuracy relative to BF16")
    right.set_xlabel("estimated API cost (USD)")
    right.set_ylabel("verified PPL rank (1 = best)")


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


def write(statuses: list[str], records: list[str], verified: dict[str, str], *, tables: dict[str, dict[str, str]],
          plots: dict[str, str], settings: dict) -> None:
    """``tables[name]`` = {csv, md, provenance}; ``plots[name]`` = png; ``verified`` = run -> the
    verification record of its final submission on its own task."""
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
        "status": ([_status_row(s) for s in status], StatusRow), "best_so_far": (ca.best_so_far(comp), ca.BestSoFarRow),
        "outcomes": (ca.outcomes(comp, tol), ca.OutcomeRow), "ranking_pairs": (ca.ranking_pairs(comp, tol), ca.RankingPairRow),
        "revisions": (ca.revisions(comp, band), ca.RevisionRow), "stopping": (ca.stopping(comp), ca.StoppingRow),
        "concurrency_paths": (paths, sa.PathRow), "first_usable_replay": (sa.first_usable(serv, gap), sa.FirstUsableRow),
        "matched_seeds": (sa.matched_seeds(serv), sa.MatchedSeedRow), "cost": (costs, cost.CostRow),
        "frontier": (cost.frontier(costs, checked), cost.FrontierRow),
    }
    inputs = {p: sha256_file(p) for p in [*statuses, *records, *verified.values()]}
    for name, (rows, model) in results.items():
        _table(rows, model, tables[name], {"table": f"runs/{name}", "settings": settings}, inputs)
    draws = {"best_so_far": _best, "outcomes": _outcomes, "ranking_pairs": _pairs, "revisions": _revisions,
             "stopping": _stopping, "concurrency_paths": _paths(points), "first_usable_replay": _first_usable,
             "matched_seeds": _matched, "cost": _cost, "frontier": _frontier}
    for name in PLOTTED:
        rows = results[name][0]
        _figure(plots[name], draws[name], rows, f"no {'serving' if ANALYSES[name] == 'Serving' else ''} runs "
                f"with data for {name.replace('_', ' ')}".replace("  ", " "),
                size=(10, 4) if name == "frontier" else (6.5, 4))
