"""How far D and G could move with other sessions: bootstrap 95% intervals that resample sessions.

A system's D (and G) is the mean over its replays (seeds) of each replay's value per GPU dollar
(:mod:`infbench.serving.value`). A replay's value is a sum over the session instances it ran in the
window (those with at least one request sent in it), so its sampling noise is the noise of which
sessions were drawn. Each bootstrap resample draws, within every replay, as many session instances as
it ran, with replacement, and recomputes the mean over replays; the interval is the 2.5th and 97.5th
percentile of ``bootstrap_resamples`` resamples. A replay invalid for context overflows scores D = 0
in every resample, as it does in the table.

``completed_timed_requests``: the requests that count (sent in the window and completed, finite TTFT
and TPOT), summed over the replays; a table shows a D only when it reaches
``serving.uncertainty.min_completed_requests``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from infbench.config.model import Deployment, UncertaintySettings
from infbench.seeding import derive_seed
from infbench.serving.value import (
    Score,
    Targets,
    completed_mask,
    qualified_mask,
    request_value,
)


class Spread(BaseModel):
    d_ci95_low: float | None
    d_ci95_high: float | None
    g_ci95_low: float
    g_ci95_high: float
    sessions: int = Field(description="session instances in the windows of all replays")
    completed_timed_requests: int


def session_values(frame: pd.DataFrame, dep: Deployment, targets: Targets | None) -> pd.DataFrame:
    """Per session instance run in the window: gross and qualified value (USD) of its completed requests."""
    win = frame[frame["in_window"]]
    done = frame[completed_mask(frame)]
    v = request_value(done["input_tokens"].to_numpy(float), done["output_tokens"].to_numpy(float), dep)
    q = np.zeros(len(done), dtype=bool) if targets is None else qualified_mask(done, targets)
    per = pd.DataFrame({"instance": done["instance"].to_numpy(), "gross": v, "qualified": v * q})
    sums = per.groupby("instance")[["gross", "qualified"]].sum()
    return sums.reindex(sorted(set(win["instance"])), fill_value=0.0)


def spread(
    frames: list[pd.DataFrame],
    scores: list[Score],
    dep: Deployment,
    targets: Targets | None,
    settings: UncertaintySettings,
    key: str,
) -> Spread:
    """Bootstrap intervals of the mean D and G over ``frames`` (one replay each, scored as ``scores``)."""
    rng = np.random.default_rng(derive_seed(settings.seed, "serving-bootstrap", key))
    b = settings.bootstrap_resamples
    d_sum, g_sum = np.zeros(b), np.zeros(b)
    sessions = 0
    for frame, score in zip(frames, scores):
        values = session_values(frame, dep, targets)
        n = len(values)
        sessions += n
        if n == 0:
            continue
        idx = rng.integers(n, size=(b, n))
        g_sum += values["gross"].to_numpy()[idx].sum(1) / score.cost_usd
        if score.valid:
            d_sum += values["qualified"].to_numpy()[idx].sum(1) / score.cost_usd
    k = len(frames)
    g = np.percentile(g_sum / k, [2.5, 97.5])
    d = np.percentile(d_sum / k, [2.5, 97.5]) if targets is not None else (None, None)
    return Spread(
        d_ci95_low=None if d[0] is None else float(d[0]),
        d_ci95_high=None if d[1] is None else float(d[1]),
        g_ci95_low=float(g[0]),
        g_ci95_high=float(g[1]),
        sessions=sessions,
        completed_timed_requests=sum(s.completed for s in scores),
    )
