"""Revision effects of compression runs: ``100 (E_after / E_before - 1)`` with ``E = ln(PPL / PPL_BF16)``
(negative: the revision removed excess cross-entropy), grouped by package-size change (PROTOCOL A8)."""

from __future__ import annotations

from matplotlib.figure import Figure

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.compression_analysis import RevisionRow

BANDS = ["within band", "size changed"]


def draw(rows: list[RevisionRow]) -> Figure:
    fig, ax = layout.axes(rows, "no compression runs with revisions (consecutive scored packages)")
    runs = layout.by_run(rows)
    width = 0.5 / max(1, len(runs))
    for k, ((run, rs), style) in enumerate(zip(runs, layout.styles())):
        offset = (k - (len(runs) - 1) / 2) * width  # runs side by side within a band
        ax.scatter(
            [BANDS.index(r.size_band) + offset for r in rs],
            [r.effect_pct for r in rs],
            label=run,
            color=style["color"],
            marker=style["marker"],
            s=30,
            zorder=3,
        )
    if rows:
        ax.axhline(0, color="0.3", lw=0.8)
        ax.set_xticks(range(len(BANDS)), ["package size within band", "package size changed"])
        ax.set_xlim(-0.6, len(BANDS) - 0.4)
        ax.set_ylabel("effect on excess cross-entropy E (%)\n(negative: better)")
        ax.set_title("Revision effects: 100 (E_after / E_before - 1), E = ln(PPL / PPL_BF16)", fontsize=9)
        layout.legend(ax, "run")
    return fig


def plot(rows: list[RevisionRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, RevisionRow, csv_path)
