"""Compression runs' final artifacts as verified on their task, against size and cost (the paper's
Figure 1): (a) mean accuracy relative to BF16 against package bits per parameter, (b) API cost
against the verified PPL rank within the task (1 = best). Filled: verified; open: failed."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from infbench.plots import figure
from infbench.runs.cost_analysis import FrontierRow


def _points(ax, rows: list[FrontierRow], x, y, empty: str) -> None:
    texts, xs, ys = [], [], []
    for r in rows:
        if x(r) is None or y(r) is None:
            continue
        verified = r.verdict == "verified"
        ax.plot(
            x(r),
            y(r),
            ls="none",
            marker="o",
            fillstyle="full" if verified else "none",
            color="C0",
            markersize=8,
            zorder=3,
        )
        texts.append(
            ax.text(
                x(r), y(r), r.run if verified else f"{r.run} ({r.verdict})", fontsize=7, bbox=figure.LABEL_BOX, zorder=2
            )
        )
        xs.append(x(r))
        ys.append(y(r))
    if not texts:
        figure.say_empty(ax, empty)
    figure.place_labels(ax, texts, xs, ys)


def draw(rows: list[FrontierRow]) -> Figure:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    if not rows:
        figure.say_empty(left, "no compression runs with a verified final submission")
        right.set_axis_off()
    else:
        _points(
            left,
            rows,
            lambda r: r.bits_per_param,
            lambda r: r.accuracy_rel,
            "no final artifact with a package size and an accuracy relative to BF16",
        )
        left.axhline(1.0, color="0.3", lw=0.8, ls="--", zorder=1)
        left.set_xlabel("package bits per source parameter")
        left.set_ylabel("mean accuracy relative to BF16")
        left.set_title("(a) accuracy vs size of final artifacts", fontsize=9)
        _points(
            right, rows, lambda r: r.cost_usd, lambda r: r.ppl_rank, "no verified final artifact: a PPL rank needs one"
        )
        right.set_xlabel("estimated API cost (USD)")
        right.set_ylabel("verified PPL rank within the task (1 = best)")
        right.set_title("(b) cost vs rank (verified artifacts only)", fontsize=9)
        right.yaxis.get_major_locator().set_params(integer=True)
        if right.axison:
            right.invert_yaxis()
    fig.tight_layout(w_pad=3.0)  # the panels' end tick labels stay apart
    return fig


def plot(rows: list[FrontierRow], png_path: str, csv_path: str) -> None:
    figure.save(draw(rows), png_path, rows, FrontierRow, csv_path)
