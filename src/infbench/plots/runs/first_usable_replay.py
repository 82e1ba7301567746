"""Time to each serving run's first usable replay: one that completed requests with qualified
value D > 0 (PROTOCOL B6); a run without one is marked "none"."""

from __future__ import annotations

from matplotlib.figure import Figure

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.serving_analysis import FirstUsableRow


def draw(rows: list[FirstUsableRow]) -> Figure:
    fig, ax = layout.axes(rows, "no serving runs", size=(7.5, 1.4 + 0.45 * max(3, len(rows))))
    k, unit = layout.time_unit([r.first_usable_h for r in rows])
    for i, r in enumerate(rows):
        if r.first_usable_h is None:
            ax.text(0, i, f"  none ({r.replays} replays)", va="center", fontsize=8, color="C3")
        else:
            ax.barh(i, k * r.first_usable_h, color="C0", height=0.6)
            ax.text(
                k * r.first_usable_h,
                i,
                f"  {k * r.first_usable_h:.3g} {unit} ({r.replays} replays)",
                va="center",
                fontsize=7,
            )
    if rows:
        ax.set_yticks(range(len(rows)), [r.run for r in rows])
        ax.set_ylim(len(rows) - 0.5, -0.5)
        longest = k * max([r.first_usable_h or 0 for r in rows])
        ax.set_xlim(0, 1.35 * longest if longest else 1)
        ax.set_xlabel(f"{unit} from the run's start to its first usable replay")
        ax.set_title("First usable end-to-end replay (completed requests, D > 0)", fontsize=9)
    return fig


def plot(rows: list[FirstUsableRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, FirstUsableRow, csv_path)
