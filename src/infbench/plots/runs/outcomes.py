"""Reward-evaluation outcomes per quarter of each compression run: new best, same as best (within
the outcome tolerance) or worse (PROTOCOL A8); one group of four stacked bars per run."""

from __future__ import annotations

from matplotlib.figure import Figure

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.compression_analysis import OutcomeRow

CLASSES = [("new_best", "new best", "C2"), ("same_as_best", "same as best", "C0"), ("worse", "worse", "C3")]


def draw(rows: list[OutcomeRow]) -> Figure:
    groups = layout.by_run(rows)
    fig, ax = layout.axes(
        rows, "no compression runs with reward evaluations", size=(max(6.5, 1.6 * len(groups) + 3), 4.2)
    )
    ticks, labels = [], []
    for g, (run, rs) in enumerate(groups):
        xs = [5 * g + r.quarter - 1 for r in rs]
        bottom = [0] * len(rs)
        for field, name, color in CLASSES:
            values = [getattr(r, field) for r in rs]
            ax.bar(xs, values, bottom=bottom, color=color, width=0.8, label=name if g == 0 else None)
            bottom = [b + v for b, v in zip(bottom, values)]
        ticks += xs
        labels += [f"Q{r.quarter}" for r in rs]
        ax.text(5 * g + 1.5, -0.13, run, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=8)
    if rows:
        ax.set_xticks(ticks, labels, fontsize=7)
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(0, 1.15 * max(r.new_best + r.same_as_best + r.worse for r in rows) or 1)
        ax.set_ylabel("reward evaluations")
        ax.set_title("Reward-evaluation outcomes by quarter of the run (Q1 = first quarter of its time)", fontsize=9)
        layout.legend(ax, "outcome")
    return fig


def plot(rows: list[OutcomeRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, OutcomeRow, csv_path)
