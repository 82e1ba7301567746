"""What the run figures share: a figure that says why it is empty, runs in order, line styles that
stay apart when runs overlap, and a legend outside the data."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from infbench.plots import figure  # noqa: E402


def axes(rows: Sequence, empty: str, size: tuple[float, float] = (7.5, 4.2)) -> tuple[plt.Figure, plt.Axes]:
    """A figure with one axes; without ``rows`` the axes says ``empty`` instead."""
    fig, ax = plt.subplots(figsize=size)
    if not rows:
        figure.say_empty(ax, empty)
    return fig, ax


def by_run(rows: Sequence) -> list[tuple[str, list]]:
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r.run, []).append(r)
    return list(out.items())


def styles() -> Iterator[dict]:
    """Colour, marker and dash per run, so that runs drawn over each other stay distinguishable."""
    return (
        {"color": c, "marker": m, "ls": ls, "lw": 1.4, "markersize": 5}
        for c, m, ls in zip(
            plt.get_cmap("tab10").colors, itertools.cycle("osD^vP*X"), itertools.cycle(["-", "--", "-.", ":"])
        )
    )


def legend(ax: plt.Axes, title: str) -> None:
    """The legend to the right of the axes, never over the data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(
            title=title, fontsize=7, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False
        )


def time_unit(hours: Sequence[float | None]) -> tuple[float, str]:
    """(factor from hours, unit) that keeps the longest of ``hours`` readable: hours from one
    hour up, minutes from one minute, else seconds (a scripted run lasts seconds)."""
    longest = max([h for h in hours if h is not None] + [0.0])
    if longest >= 1:
        return 1.0, "hours"
    return (60.0, "minutes") if longest >= 1 / 60 else (3600.0, "seconds")
