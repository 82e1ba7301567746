"""Best-so-far search-set PPL over design time, one step line per compression run (PROTOCOL A8);
every reward evaluation's own PPL is a faint dot, one that failed (reward 0) a cross."""

from __future__ import annotations

from matplotlib.figure import Figure

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.compression_analysis import BestSoFarRow


def draw(rows: list[BestSoFarRow]) -> Figure:
    fig, ax = layout.axes(rows, "no compression runs with reward evaluations")
    k, unit = layout.time_unit([r.t_hours for r in rows])
    for (run, rs), style in zip(layout.by_run(rows), layout.styles()):
        best = [(k * r.t_hours, r.best_ppl) for r in rs if r.best_ppl is not None]
        if best:
            xs, ys = zip(*best)
            ax.step([*xs, k * rs[-1].t_hours], [*ys, ys[-1]], where="post", label=run, **style)
        ok = [(k * r.t_hours, r.ppl) for r in rs if r.ppl is not None and r.reward > 0]
        failed = [(k * r.t_hours, r.ppl) for r in rs if r.ppl is not None and r.reward <= 0]
        if ok:
            ax.scatter(*zip(*ok), s=14, color=style["color"], alpha=0.35, zorder=2)
        if failed:
            ax.scatter(*zip(*failed), s=18, marker="x", color=style["color"], alpha=0.6, zorder=2)
    if rows:
        ax.set_xlim(left=0)
        ax.set_xlabel(f"design time ({unit} since the run's start)")
        ax.set_ylabel("search-set PPL (lower is better)")
        ax.set_title(
            "Best-so-far PPL of feasible reward evaluations (line); each evaluation (dot, x: reward 0)", fontsize=9
        )
        layout.legend(ax, "run")
    return fig


def plot(rows: list[BestSoFarRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, BestSoFarRow, csv_path)
