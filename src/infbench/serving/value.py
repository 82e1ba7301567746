"""Dollars per dollar (PROTOCOL B2): qualified value D, gross value G, qualified share f.

``v_i = (p_in * x_i + p_out * y_i) / 1e6`` with client-measured input and output
token counts. Only *completed* requests count: sent inside the window,
well-formed (see :mod:`infbench.serving.replay`) with finite TTFT and TPOT.
``q_i = 1`` iff TTFT <= tau_first and TPOT <= tau_token (the paper's rule: D uses it).
``D = sum q_i v_i / (d r W / 3600)``, ``G = sum v_i / (d r W / 3600)``, ``f = D / G``.

Reported beside D, never ranking: the **per-token deadline rule**. A request meets it iff every
streamed token i (from 0) arrived by ``send + tau_first + i * tau_token``; ``D_deadline`` and
``f_deadline`` are D and f with it in place of ``q_i``. Unlike the paper's rule it is monotone:
delivering any token later can never make a request qualify, so holding tokens back to shrink TPOT
(a late first token, then a burst) gains nothing under it. A request without streamed token ids
(counted by usage) has no arrivals to check and does not meet it. Why D keeps the paper's rule:
``docs/protocol.md`` (B2).

A run is *invalid* (as AgentX marks it) when more than ``max_overflow_share`` of
the requests sent in the window were refused for not fitting the server's
context: its ``D`` is 0 and ``invalid_reason`` says why.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from infbench.config.model import Deployment


class Targets(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tau_first_s: float = Field(gt=0)
    tau_token_s: float = Field(gt=0)


class Score(BaseModel):
    D: float | None
    G: float
    f: float | None
    window_s: float
    cost_usd: float
    gross_usd: float
    qualified_usd: float | None
    requests_in_window: int
    completed: int
    qualified: int | None
    D_deadline: float | None
    f_deadline: float | None
    deadline_qualified: int | None
    failed: int
    p90_ttft_s: float | None
    p90_tpot_s: float | None
    output_tokens: int
    input_tokens: int
    context_overflows: int
    overflow_share: float
    valid: bool
    invalid_reason: str


def request_value(x: np.ndarray | float, y: np.ndarray | float, dep: Deployment):
    return (dep.input_usd_per_mtok * x + dep.output_usd_per_mtok * y) / 1e6


def completed_mask(frame: pd.DataFrame) -> pd.Series:
    return frame["in_window"] & frame["ok"] & np.isfinite(frame["ttft"]) & np.isfinite(frame["tpot"])


def qualified_mask(done: pd.DataFrame, targets: Targets) -> np.ndarray:
    """The paper's ``q_i`` of completed requests: TTFT <= tau_first and TPOT <= tau_token."""
    return ((done["ttft"] <= targets.tau_first_s) & (done["tpot"] <= targets.tau_token_s)).to_numpy()


def deadline_mask(done: pd.DataFrame, targets: Targets) -> np.ndarray:
    """Completed requests whose every token i arrived by ``tau_first + i * tau_token`` after send."""

    def met(arrivals) -> bool:
        a = np.asarray(arrivals, dtype=float)
        return len(a) > 0 and bool((a <= targets.tau_first_s + targets.tau_token_s * np.arange(len(a))).all())

    return np.fromiter((met(a) for a in done["token_arrivals"]), dtype=bool, count=len(done))


def _p90(values: pd.Series) -> float | None:
    return float(np.percentile(values, 90)) if len(values) else None


def score(
    frame: pd.DataFrame, dep: Deployment, window_s: float, max_overflow_share: float, targets: Targets | None = None
) -> Score:
    """Score one replay's records; without targets only G and the latency percentiles."""
    win = frame[frame["in_window"]]
    done = frame[completed_mask(frame)]
    values = request_value(done["input_tokens"].to_numpy(float), done["output_tokens"].to_numpy(float), dep)
    cost = dep.devices * dep.usd_per_device_hour * window_s / 3600.0
    gross = float(values.sum())
    overflows = int(win["context_overflow"].sum())
    share = overflows / len(win) if len(win) else 0.0
    invalid_reason = (
        f"{overflows} of {len(win)} requests in the window ({100 * share:.1f}%) overflowed the "
        f"server's context (at most {100 * max_overflow_share:g}% allowed)"
        if share > max_overflow_share
        else ""
    )
    qualified_usd = n_q = D = f = D_deadline = f_deadline = n_deadline = None
    if targets is not None:
        q = qualified_mask(done, targets)
        qualified_usd = float(values[q].sum())
        n_q = int(q.sum())
        D = 0.0 if invalid_reason else qualified_usd / cost
        f = qualified_usd / gross if gross > 0 else None
        met = deadline_mask(done, targets)
        n_deadline = int(met.sum())
        D_deadline = 0.0 if invalid_reason else float(values[met].sum()) / cost
        f_deadline = float(values[met].sum()) / gross if gross > 0 else None
    return Score(
        D=D,
        G=gross / cost,
        f=f,
        window_s=window_s,
        cost_usd=cost,
        gross_usd=gross,
        qualified_usd=qualified_usd,
        requests_in_window=len(win),
        completed=len(done),
        qualified=n_q,
        D_deadline=D_deadline,
        f_deadline=f_deadline,
        deadline_qualified=n_deadline,
        failed=int((~win["ok"]).sum()),
        p90_ttft_s=_p90(done["ttft"]),
        p90_tpot_s=_p90(done["tpot"]),
        output_tokens=int(done["output_tokens"].sum()),
        input_tokens=int(done["input_tokens"].sum()),
        context_overflows=overflows,
        overflow_share=share,
        valid=not invalid_reason,
        invalid_reason=invalid_reason,
    )
