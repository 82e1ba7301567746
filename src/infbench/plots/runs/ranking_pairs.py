"""Local-metric ranking pairs per compression run: consecutive versions ranked by a local metric
(e.g. reconstruction MSE), confirmed or reversed by the next reward feedback, or tied (PROTOCOL A8).
The title gives the reversed share, as the paper reports it (17 of 79)."""

from __future__ import annotations

from matplotlib.figure import Figure
from pydantic import BaseModel

from infbench.plots import figure
from infbench.plots.runs import layout
from infbench.runs.compression_analysis import RankingPairRow

VERDICTS = [("confirmed", "C2"), ("reversed", "C3"), ("tie", "0.6")]


class RankingCount(BaseModel):
    run: str
    confirmed: int
    reversed: int
    tie: int


def counts(rows: list[RankingPairRow]) -> list[RankingCount]:
    return [
        RankingCount(run=run, **{v: sum(r.verdict == v for r in rs) for v, _ in VERDICTS})
        for run, rs in layout.by_run(rows)
    ]


def draw(rows: list[RankingPairRow]) -> Figure:
    data = counts(rows)
    fig, ax = layout.axes(
        data,
        "no compression runs with ranking pairs (two versions with a local metric, each with reward feedback)",
        size=(7.5, 1.4 + 0.45 * max(3, len(data))),
    )
    left = [0] * len(data)
    for verdict, color in VERDICTS:
        values = [getattr(c, verdict) for c in data]
        ax.barh([c.run for c in data], values, left=left, color=color, label=verdict, height=0.6)
        left = [a + b for a, b in zip(left, values)]
    if data:
        ax.set_ylim(len(data) - 0.5, -0.5)
        ax.set_xlim(0, 1.08 * max(left))
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("ranking pairs (consecutive versions with a shared local metric)")
        ax.set_title(
            f"Local ranking vs reward feedback: {sum(c.reversed for c in data)} of {len(rows)} reversed", fontsize=9
        )
        layout.legend(ax, "feedback")
    return fig


def plot(rows: list[RankingPairRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, counts(rows), RankingCount, csv_path)
