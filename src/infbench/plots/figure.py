"""Writing a figure with the data it shows: the PNG and, next to it, a CSV of its plotted points
(one row per point, the columns of the point model), so that a reader can re-plot it."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from adjustText import adjust_text  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from infbench import atomic  # noqa: E402

DPI = 120
LABEL_BOX = {"facecolor": "white", "alpha": 0.75, "edgecolor": "none", "pad": 0.6}  # labels stay legible over lines


def write_points(points: Sequence[BaseModel], model: type[BaseModel], csv_path: str) -> None:
    frame = pd.DataFrame([p.model_dump() for p in points], columns=list(model.model_fields))
    atomic.write_text(csv_path, frame.to_csv(index=False, float_format="%.6g", lineterminator="\n"))


def save(fig: plt.Figure, png_path: str, points: Sequence[BaseModel], model: type[BaseModel], csv_path: str) -> None:
    """Write ``fig`` as ``png_path`` and ``points`` as ``csv_path``, then close the figure."""
    write_points(points, model, csv_path)
    with atomic.atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)


def say_empty(ax: plt.Axes, message: str) -> None:
    """An axes that states why it holds no data instead of showing empty axes."""
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, wrap=True)
    ax.set_axis_off()


def _stack_coincident(ax: plt.Axes, texts: list) -> None:
    """Start labels of points at the same place one line apart: adjustText moves exactly
    coincident labels alike and leaves them on top of each other."""
    seen: dict[tuple[float, float], int] = {}
    for t in texts:
        x, y = ax.transData.transform(t.get_position())
        k = seen.get((round(x), round(y)), 0)
        seen[(round(x), round(y))] = k + 1
        if k:
            t.set_position(ax.transData.inverted().transform((x, y + 1.6 * k * t.get_fontsize())))


def place_labels(
    ax: plt.Axes,
    texts: list,
    x: Sequence[float],
    y: Sequence[float],
    avoid: Sequence[tuple[float, float]] = (),
    objects: Sequence = (),
) -> None:
    """Move ``texts`` (labels of the points ``x``, ``y``) apart and off the points, ``avoid`` (more
    data points, e.g. along error bars) and ``objects`` (other texts), with a thin line back to
    their point. adjustText runs for a fixed number of iterations (by default it stops after a
    second of wall time), so the same data gives the same figure."""
    if not texts:
        return
    _stack_coincident(ax, texts)
    extra_x, extra_y = zip(*avoid) if avoid else ((), ())
    adjust_text(
        texts,
        x=[*x, *extra_x],
        y=[*y, *extra_y],
        target_x=list(x),
        target_y=list(y),
        ax=ax,
        objects=list(objects) or None,
        expand=(1.5, 1.8),
        force_static=(0.5, 0.8),
        force_text=(0.3, 0.5),
        iter_lim=400,
        time_lim=None,
        arrowprops={"arrowstyle": "-", "color": "0.5", "lw": 0.5},
    )
