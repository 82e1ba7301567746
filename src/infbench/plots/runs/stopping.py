"""Stopping of compression runs: the first completion declaration against the last weight change,
time since the run's start (PROTOCOL A8); a line joins them when both exist."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.compression_analysis import StoppingRow


def draw(rows: list[StoppingRow]) -> Figure:
    fig, ax = layout.axes(rows, "no compression runs", size=(7.5, 1.4 + 0.45 * max(3, len(rows))))
    k, unit = layout.time_unit([h for r in rows for h in (r.first_completion_h, r.last_weight_change_h)])
    for i, r in enumerate(rows):
        if r.first_completion_h is not None and r.last_weight_change_h is not None:
            ax.plot([k * r.first_completion_h, k * r.last_weight_change_h], [i, i], color="0.6", lw=1.5, zorder=1)
        if r.last_weight_change_h is not None:
            ax.scatter(k * r.last_weight_change_h, i, marker="s", color="C0", zorder=3)
        if r.first_completion_h is not None:
            ax.scatter(k * r.first_completion_h, i, marker="X", color="C3", s=50, zorder=3)
        if r.first_completion_h is None:
            ax.text(0, i, "  no completion declared", va="center", fontsize=7, color="0.4")
    if rows:
        ax.set_yticks(range(len(rows)), [r.run for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(left=0)
        ax.set_xlabel(f"{unit} since the run's start")
        ax.set_title("First completion declaration vs last weight change", fontsize=9)
        ax.legend(
            handles=[
                Line2D([], [], ls="none", marker="s", color="C0", label="last weight change"),
                Line2D([], [], ls="none", marker="X", color="C3", label="first completion declaration"),
            ],
            title="event",
            fontsize=7,
            title_fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            frameon=False,
        )
    return fig


def plot(rows: list[StoppingRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, StoppingRow, csv_path)
