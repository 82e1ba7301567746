"""Matched-seed comparisons of consecutive server versions of serving runs: after / before of D, G
and f on the same seed (PROTOCOL B6); one group of bars per comparison, 1 = unchanged."""

from __future__ import annotations

from matplotlib.figure import Figure

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.serving_analysis import MatchedSeedRow

RATIOS = [("d_ratio", "D (qualified value)"), ("g_ratio", "G (gross value)"), ("f_ratio", "f (qualified share)")]


def draw(rows: list[MatchedSeedRow]) -> Figure:
    fig, ax = layout.axes(
        rows, "no serving runs with two versions replayed on the same seed", size=(7.5, 1.4 + 0.6 * max(3, len(rows)))
    )
    height = 0.8 / len(RATIOS)
    for k, (field, name) in enumerate(RATIOS):
        ys = [i + (k - 1) * height for i in range(len(rows))]
        values = [getattr(r, field) for r in rows]
        ax.barh(ys, [v or 0 for v in values], height=height, color=f"C{k}", label=name)
        for y, v in zip(ys, values):
            ax.text(v or 0, y, f" {v:.3g}" if v is not None else " n/a", va="center", fontsize=6.5)
    if rows:
        ax.axvline(1, color="0.3", lw=0.8)
        ax.set_yticks(
            range(len(rows)), [f"{r.run}\n{r.before[:8]} > {r.after[:8]}, seed {r.seed}" for r in rows], fontsize=7
        )
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(left=0)
        ax.set_xlabel("after / before (same seed)")
        ax.set_title("Matched-seed ratios of consecutive server versions", fontsize=9)
        layout.legend(ax, "ratio of")
    return fig


def plot(rows: list[MatchedSeedRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, MatchedSeedRow, csv_path)
