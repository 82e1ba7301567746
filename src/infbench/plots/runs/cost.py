"""Estimated API cost of each run (its transcripts' tokens at the configured prices), with its
token count (uncached input, cache writes, cache reads and output together)."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.cost_analysis import CostRow


def tokens(n: int) -> str:
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g} {unit}tok"
    return f"{n} tok"


def draw(rows: list[CostRow]) -> Figure:
    fig, ax = layout.axes(rows, "no runs", size=(7.5, 1.4 + 0.45 * max(3, len(rows))))
    for i, r in enumerate(rows):
        ax.barh(i, r.cost_usd, color="C0", height=0.6)
        total = r.input_tokens + r.cache_write_tokens + r.cached_tokens + r.output_tokens
        ax.text(r.cost_usd, i, f"  USD {r.cost_usd:.3g}, {tokens(total)}", va="center", fontsize=7)
    if rows:
        ax.set_yticks(range(len(rows)), [f"{r.run}\n({r.agent})" for r in rows], fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        top = max(r.cost_usd for r in rows)
        ax.set_xlim(0, 1.45 * top if top > 0 else 1.0)
        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.set_xlabel("estimated API cost (USD)")
        ax.set_title("Agent API cost per run", fontsize=9)
    return fig


def plot(rows: list[CostRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, CostRow, csv_path)
