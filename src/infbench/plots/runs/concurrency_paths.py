"""Concurrency paths of serving runs over agent-active time (idle gaps capped), one step line per
run labelled with its class: raise & hold, retreat, oscillate, never tuned (PROTOCOL B6)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.serving_analysis import PathPoint


def draw(pts: list[PathPoint]) -> Figure:
    fig, ax = layout.axes(pts, "no serving runs with load changes or replays")
    k, unit = layout.time_unit([p.active_h for p in pts])
    for (run, ps), style in zip(layout.by_run(pts), layout.styles()):
        ax.step(
            [k * p.active_h for p in ps],
            [p.concurrency for p in ps],
            where="post",
            label=f"{run} ({ps[0].classification})",
            **style,
        )
    if pts:
        levels = sorted({p.concurrency for p in pts})
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_locator(FixedLocator(levels))
        ax.yaxis.set_major_formatter("{x:g}")
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_xlim(left=0)
        ax.set_xlabel(f"agent-active time, {unit} (idle gaps capped)")
        ax.set_ylabel("session concurrency c (log scale)")
        ax.set_title("Concurrency paths: load changes and replays", fontsize=9)
        layout.legend(ax, "run (path class)")
    return fig


def plot(pts: list[PathPoint], png_path: str, csv_path: str) -> None:
    figure.save(draw(pts), png_path, pts, PathPoint, csv_path)
