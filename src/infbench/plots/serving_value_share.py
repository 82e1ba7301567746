"""``results/plots/serving_value_share.{png,csv}``: gross value ``G`` against the qualified share
``f = D / G`` per system, one panel per deployment (the paper's Figure 4 layout).

Both axes start at 0 and ``f`` runs to 1. Dashed curves ``G = D / f`` are lines of equal qualified
value ``D``, drawn at the calibration baseline's ``D`` and multiples of it (the baseline itself is
the black star). Each system's point is the mean over its final seeds; its label gives ``D @ c``
and the completed timed requests it rests on, its bootstrap 95% intervals are drawn (``G``) and
printed (``D``); a row with too few completed requests for a D (the table's minimum) says so.
"""

from __future__ import annotations

import itertools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from infbench.plots import figure  # noqa: E402
from infbench.tables.serving import ServingRow  # noqa: E402

BASELINE, SYSTEM = "calibration baseline", "system"
ISO_MULTIPLES = (0.5, 1, 2, 4)  # equal-D curves at these multiples of the baseline's D


class ServingPoint(BaseModel):
    deployment: str
    role: str  # "calibration baseline" or "system"
    system: str
    concurrency: int
    seeds: str
    f: float | None
    G: float
    D: float | None  # None: fewer completed timed requests than the table's minimum
    G_ci95_low: float
    G_ci95_high: float
    D_ci95_low: float | None
    D_ci95_high: float | None
    completed_requests: int  # completed timed requests over the seeds


def point(row: ServingRow, role: str) -> ServingPoint:
    return ServingPoint(
        deployment=row.deployment,
        role=role,
        system=row.system,
        concurrency=row.concurrency,
        seeds=row.seeds,
        f=row.f,
        G=row.G,
        D=row.D,
        G_ci95_low=row.g_ci95_low,
        G_ci95_high=row.g_ci95_high,
        D_ci95_low=row.d_ci95_low,
        D_ci95_high=row.d_ci95_high,
        completed_requests=row.completed_timed_requests,
    )


def points(baseline: ServingRow, systems: list[ServingRow]) -> list[ServingPoint]:
    return [point(baseline, BASELINE), *(point(r, SYSTEM) for r in systems)]


def _label(p: ServingPoint) -> str:
    name = p.system.removesuffix(f" ({BASELINE})")
    ci = f" [{p.D_ci95_low:.3g}, {p.D_ci95_high:.3g}]" if p.D_ci95_low is not None else ""
    d = "too few requests" if p.D is None else f"{p.D:.3g}{ci}"
    seeds = len(p.seeds.split(","))
    head = f"{name} ({BASELINE})" if p.role == BASELINE else name
    tail = "" if p.f is not None else " (nothing completed: f undefined)"
    plural = "s" if seeds > 1 else ""
    return f"{head}: D = {d} @{p.concurrency}, n = {p.completed_requests} req, {seeds} seed{plural}{tail}"


def _iso_levels(baseline: ServingPoint, g_max: float) -> list[tuple[float, str]]:
    if baseline.D:
        return [
            (k * baseline.D, f"D = {k:g}x baseline" if k != 1 else f"D = baseline {baseline.D:.3g}")
            for k in ISO_MULTIPLES
        ]
    return [(d, f"D = {d:.3g}") for d in MaxNLocator(4).tick_values(0, g_max)[1:]]


def _panel(ax, pts: list[ServingPoint]) -> None:
    highs = [max(p.G_ci95_high, p.G) for p in pts]
    g_max = 1.18 * max([*highs, 1e-9])
    ax.set_xlim(0, 1.0)  # f is a share; points at f = 1 sit on the right edge
    ax.set_ylim(0, g_max)
    baseline = next(p for p in pts if p.role == BASELINE)
    f = np.linspace(0.005, 1, 400)
    for d, text in _iso_levels(baseline, g_max):
        if d >= g_max:  # G = D / f >= D: the curve never enters the panel
            continue
        ax.plot(f, d / f, color="0.55", lw=0.8, ls="--", zorder=1)
        ax.annotate(
            text,
            (1.0, d),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=7,
            color="0.4",
            ha="left",
            va="center",
            annotation_clip=False,
        )  # where the curve meets f = 1, outside
    colors = itertools.cycle(plt.get_cmap("tab10").colors)
    texts, xs, ys, avoid = [], [], [], []
    for p in pts:
        x, y = (0.0 if p.f is None else p.f), p.G
        if p.role == BASELINE:
            ax.plot(
                x,
                y,
                marker="*",
                markersize=16,
                color="black",
                markeredgecolor="white",
                ls="none",
                zorder=7,
                clip_on=False,
            )  # over the systems' markers
            color = "black"
        else:
            color = next(colors)
            ax.errorbar(
                x,
                y,
                yerr=[[max(0.0, y - p.G_ci95_low)], [max(0.0, p.G_ci95_high - y)]],
                color=color,
                capsize=3,
                lw=1,
                clip_on=False,
            )
            avoid += [(x, g) for g in np.linspace(p.G_ci95_low, p.G_ci95_high, 15)]
            ax.plot(
                x,
                y,
                marker="o" if p.f is not None else "x",
                markersize=8,
                color=color,
                ls="none",
                zorder=6,
                clip_on=False,
            )
        texts.append(ax.text(x, y, _label(p), fontsize=7, color=color, bbox=figure.LABEL_BOX, zorder=5))
        xs.append(x)
        ys.append(y)
    figure.place_labels(ax, texts, xs, ys, avoid)
    ax.set_xlabel("qualified share f = D / G (value meeting both latency targets)")
    ax.set_ylabel("gross value G (USD of tokens per USD of GPU time)")
    ax.set_title(pts[0].deployment, fontsize=10)
    ax.grid(alpha=0.25)


def draw(pts: list[ServingPoint]) -> Figure:
    deployments = sorted({p.deployment for p in pts})
    fig, axes = plt.subplots(1, max(1, len(deployments)), figsize=(7 * max(1, len(deployments)), 5), squeeze=False)
    for ax, dep in zip(axes[0], deployments):
        _panel(ax, [p for p in pts if p.deployment == dep])
    fig.tight_layout()
    return fig


def plot(pts: list[ServingPoint], png_path: str, csv_path: str) -> None:
    figure.save(draw(pts), png_path, pts, ServingPoint, csv_path)
