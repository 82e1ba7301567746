"""``results/plots/accuracy_vs_bits.{png,csv}``: CompressionBench final verification in the layout of
the paper's Figure 1a, one column of panels per source.

Top: ``F_v`` with its bootstrap 95% interval against package bits per source parameter; bottom
(when the accuracy gate ran): mean answer accuracy relative to BF16, with the gate ``rho``. Each
task's storage limit is a vertical line at its bits per parameter, the BF16 reference a horizontal
line at 1. A candidate is measured once per source and judged under every task: a filled marker is
verified under every limit, a half-filled one under some, an open one under none (its shape names
the check it failed under the loosest limit). Candidates carry short numbers, placed apart by
adjustText; the numbered legend gives each one's name and verdict per limit. A candidate without
``F_v`` (its execution failed) sits on the bottom edge. The CSV has one row per task x candidate.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from infbench.compression.records import EvaluationRecord  # noqa: E402
from infbench.compression.submission import GIB  # noqa: E402
from infbench.plots import figure  # noqa: E402

VERIFIED = "verified"
# the check a candidate failed -> its open marker
MARKERS = {"storage_package": "s", "storage_resident": "s", "accuracy_gate": "v", "package": "X", "execution": "X"}
INTEGRITY_MARKER = "D"  # every other check: integrity (statefulness, likelihood above the source, transport, ...)


class CandidatePoint(BaseModel):
    """One task x candidate, as plotted."""

    number: int  # the candidate's number in the figure (one per source x candidate)
    source: str
    task: str
    limit_gib: float
    limit_bits_per_param: float  # 8 * limit bytes / source parameters
    candidate: str
    bits_per_param: float | None
    f_v: float | None
    f_v_ci95_low: float | None
    f_v_ci95_high: float | None
    accuracy_rel: float | None  # A(a) / A(p)
    verdict: str  # "verified" or the failing check


def points(records: list[tuple[EvaluationRecord, str]], n_params: dict[str, int]) -> list[CandidatePoint]:
    """``records``: (verification record, the candidate's name to show); ``n_params`` per source."""
    numbers: dict[tuple[str, str], int] = {}
    for r, label in sorted(records, key=lambda x: (x[0].source, -(x[0].package_bits_per_param or 0), x[1])):
        numbers.setdefault((r.source, label), len(numbers) + 1)
    out = []
    for r, label in records:
        ci = r.f_ci95 or (None, None)
        out.append(
            CandidatePoint(
                number=numbers[(r.source, label)],
                source=r.source,
                task=r.task,
                limit_gib=r.limit_gib,
                limit_bits_per_param=8 * r.limit_gib * GIB / n_params[r.source],
                candidate=label,
                bits_per_param=r.package_bits_per_param,
                f_v=r.f,
                f_v_ci95_low=ci[0],
                f_v_ci95_high=ci[1],
                accuracy_rel=r.accuracy_mean / r.accuracy_ref
                if r.accuracy_mean is not None and r.accuracy_ref
                else None,
                verdict=r.failed_check or VERIFIED,
            )
        )
    return sorted(out, key=lambda p: (p.number, p.limit_gib))


def _limits(p: float) -> str:
    return f"{p:g} GiB"


def verdict_text(judged: list[CandidatePoint]) -> str:
    """A candidate's verdicts over its source's tasks, e.g. ``verified at 0.12 GiB; 0.1 GiB: storage_package``."""
    by_verdict: dict[str, list[float]] = defaultdict(list)
    for p in sorted(judged, key=lambda p: -p.limit_gib):
        by_verdict[p.verdict].append(p.limit_gib)
    if len(by_verdict) == 1:
        (verdict,) = by_verdict
        return "verified" if verdict == VERIFIED else f"failed {verdict}"
    parts = [f"verified at {', '.join(map(_limits, by_verdict.pop(VERIFIED)))}"] if VERIFIED in by_verdict else []
    parts += [f"{', '.join(map(_limits, limits))}: failed {v}" for v, limits in by_verdict.items()]
    return "; ".join(parts)


def marker(judged: list[CandidatePoint]) -> tuple[str, str]:
    """(marker, fillstyle): filled = verified under every limit, half = under some, open = none,
    shaped by the check failed under the loosest limit."""
    verified = [p.verdict == VERIFIED for p in judged]
    if all(verified):
        return "o", "full"
    if any(verified):
        return "o", "left"
    loosest = max(judged, key=lambda p: p.limit_gib)
    return MARKERS.get(loosest.verdict, INTEGRITY_MARKER), "none"


def _style_legend() -> list[Line2D]:
    def entry(m, fill, label):
        return Line2D([], [], ls="none", marker=m, fillstyle=fill, color="0.3", markersize=7, label=label)

    return [
        entry("o", "full", "verified (every limit)"),
        entry("o", "left", "verified under some limits"),
        entry("s", "none", "failed: storage"),
        entry("v", "none", "failed: accuracy gate"),
        entry("D", "none", "failed: integrity check"),
        entry("X", "none", "failed: package / execution"),
    ]


def _panel(
    ax,
    candidates: dict[int, list[CandidatePoint]],
    value,
    interval,
    colors,
    missing_on_edge: bool,
    lines: tuple[float, ...],
) -> list:
    """Markers (and intervals) of one quantity, on a range that shows the reference ``lines``; a
    candidate without a value sits on the bottom edge if ``missing_on_edge``, else is left out.
    Returns the number labels to place and their points."""
    shown = {n: ps for n, ps in candidates.items() if ps[0].bits_per_param is not None}
    finite = [value(ps[0]) for ps in shown.values() if value(ps[0]) is not None]
    lows = [interval(ps[0])[0] for ps in shown.values() if interval(ps[0])[0] is not None]
    highs = [interval(ps[0])[1] for ps in shown.values() if interval(ps[0])[1] is not None]
    low, high = min([*finite, *lows, *lines]), max([*finite, *highs, *lines])
    pad = 0.08 * (high - low or 1.0)
    ax.set_ylim(low - pad, high + pad)
    texts, xs, ys, avoid = [], [], [], []
    for n, ps in shown.items():
        p, (m, fill) = ps[0], marker(ps)
        y = value(p)
        on_edge = y is None
        if on_edge and not missing_on_edge:
            continue
        y = ax.get_ylim()[0] if on_edge else y
        lo, hi = interval(p)
        if lo is not None and hi is not None and not on_edge:
            ax.errorbar(p.bits_per_param, y, yerr=[[y - lo], [hi - y]], color=colors[n], lw=1, capsize=3, zorder=2)
        ax.plot(
            p.bits_per_param,
            y,
            ls="none",
            marker=m,
            fillstyle=fill,
            markersize=8,
            color=colors[n],
            markeredgewidth=1.3,
            clip_on=False,
            zorder=6,
        )
        texts.append(
            ax.text(
                p.bits_per_param,
                y,
                str(n),
                fontsize=8,
                color=colors[n],
                fontweight="bold",
                bbox=figure.LABEL_BOX,
                zorder=7,
            )
        )  # over the markers of a cluster
        xs.append(p.bits_per_param)
        ys.append(y)
        if lo is not None and hi is not None and not on_edge:
            avoid += [(p.bits_per_param, v) for v in np.linspace(lo, hi, 15)]
    return [texts, xs, ys, avoid]


def _limit_lines(ax, judged: list[CandidatePoint], label: bool) -> None:
    for bits, limit in sorted({(p.limit_bits_per_param, p.limit_gib) for p in judged}):
        ax.axvline(bits, color="0.45", ls=":", lw=1.2, zorder=1)
        if label:
            ax.text(
                bits,
                0.02,
                f" limit C = {limit:g} GiB",
                transform=ax.get_xaxis_transform(),
                rotation=90,
                ha="left",
                va="bottom",
                fontsize=7,
                color="0.3",
            )


def draw(pts: list[CandidatePoint], rho: float) -> Figure:
    sources = sorted({p.source for p in pts})
    has_acc = any(p.accuracy_rel is not None for p in pts)
    rows = 2 if has_acc else 1
    fig, axes = plt.subplots(
        rows, max(1, len(sources)), figsize=(6.2 * max(1, len(sources)), 3.6 * rows + 0.6), squeeze=False, sharex="col"
    )
    if not pts:
        figure.say_empty(axes[0][0], "no verification records")
        return fig
    by_number: dict[int, list[CandidatePoint]] = defaultdict(list)
    for p in pts:
        by_number[p.number].append(p)
    colors = {}  # the same ten colours in each source's panels, in the order of its candidates' numbers
    for source in sources:
        ns = sorted(n for n, ps in by_number.items() if ps[0].source == source)
        colors |= {n: plt.get_cmap("tab10")(i % 10) for i, n in enumerate(ns)}
    numbers = []  # (axes, its number labels), placed once the layout is final
    for col, source in enumerate(sources):
        candidates = {n: ps for n, ps in sorted(by_number.items()) if ps[0].source == source}
        judged = [p for ps in candidates.values() for p in ps]
        top = axes[0][col]
        labels = [
            _panel(
                top,
                candidates,
                lambda p: p.f_v,
                lambda p: (p.f_v_ci95_low, p.f_v_ci95_high),
                colors,
                missing_on_edge=True,
                lines=(1.0,),
            )
        ]
        top.axhline(1.0, color="0.2", lw=0.8, ls="--", zorder=1)
        top.text(0.01, 1.0, "BF16 reference, F = 1", transform=top.get_yaxis_transform(), fontsize=7, va="bottom")
        top.set_ylabel("F_v = PPL(BF16) / PPL(candidate)\n(verification set, 95% bootstrap interval)", fontsize=8)
        top.set_title(source, fontsize=10)
        _limit_lines(top, judged, label=True)
        if has_acc:
            bottom = axes[1][col]
            labels.append(
                _panel(
                    bottom,
                    candidates,
                    lambda p: p.accuracy_rel,
                    lambda p: (None, None),
                    colors,
                    missing_on_edge=False,
                    lines=(1.0, rho),
                )
            )
            bottom.axhline(1.0, color="0.2", lw=0.8, ls="--", zorder=1)
            bottom.axhline(rho, color="C3", lw=1, ls="-.", zorder=1)
            bottom.text(
                0.01,
                rho,
                f"gate: A >= {rho:g} A(BF16)",
                transform=bottom.get_yaxis_transform(),
                fontsize=7,
                va="bottom",
                color="C3",
            )
            bottom.set_ylabel("mean accuracy relative to BF16\n(GSM8K, HumanEval, TriviaQA)", fontsize=8)
            _limit_lines(bottom, judged, label=False)
        axes[-1][col].set_xlabel("package bits per source parameter (8 S_pkg / n_params)")
        bits = [p.bits_per_param for p in judged if p.bits_per_param is not None]
        limits = [p.limit_bits_per_param for p in judged]
        axes[0][col].set_xlim(0, 1.06 * max([*bits, *limits, 16.0]))
        for ax in axes[:, col]:
            ax.grid(alpha=0.25)
        numbers += zip(axes[:, col], labels)
    entries = [
        Line2D(
            [],
            [],
            ls="none",
            marker=marker(ps)[0],
            fillstyle=marker(ps)[1],
            color=colors[n],
            markersize=7,
            markeredgewidth=1.3,
            label=textwrap.fill(
                f"{n}  {(ps[0].source + ': ') if len(sources) > 1 else ''}"
                f"{ps[0].candidate}: {verdict_text(ps)}"
                + ("" if ps[0].bits_per_param is not None else " (not plotted: no package size)"),
                100,
                subsequent_indent="     ",
            ),
        )
        for n, ps in sorted(by_number.items())
    ]
    fig.tight_layout(h_pad=2.0, w_pad=2.0)  # tick labels at the panels' ends stay apart
    for ax, (texts, xs, ys, avoid) in numbers:
        figure.place_labels(ax, texts, xs, ys, avoid, objects=[t for t in ax.texts if t not in texts])
    fig.legend(
        handles=entries,
        loc="upper left",
        bbox_to_anchor=(0.0, 0.0),
        fontsize=7.5,
        frameon=False,
        title="candidates (number: name: verdict per storage limit)",
        title_fontsize=8,
        alignment="left",
    )
    fig.legend(
        handles=_style_legend(),
        loc="upper left",
        bbox_to_anchor=(1.0, 0.97),
        fontsize=7.5,
        frameon=False,
        title="marker",
        title_fontsize=8,
        alignment="left",
    )
    return fig


def plot(pts: list[CandidatePoint], rho: float, png_path: str, csv_path: str) -> None:
    figure.save(draw(pts, rho), png_path, pts, CandidatePoint, csv_path)
