"""Dollars per dollar (PROTOCOL B2) on hand-made request records."""

import math

import numpy as np
import pandas as pd
import pytest

from infbench.serving.value import Deployment, Targets, request_value, score

DEP = Deployment(name="d", devices=2, accelerator="gpu", usd_per_device_hour=0.82, input_usd_per_mtok=0.1044,
                 output_usd_per_mtok=0.1855, context_limit=1 << 20)


def _frame(rows):
    cols = dict(in_window=True, ok=True, ttft=1.0, tpot=0.01, input_tokens=1000, output_tokens=100,
                context_overflow=False)
    return pd.DataFrame([cols | r for r in rows])


def test_value_per_request():
    assert request_value(1_000_000, 0, DEP) == pytest.approx(0.1044)
    assert request_value(2_000_000, 1_000_000, DEP) == pytest.approx(2 * 0.1044 + 0.1855)


def test_worked_example():
    """USD 3.65 qualified over USD 0.83 of GPU cost = 4.40."""
    dep = Deployment(name="w", devices=1, accelerator="gpu", usd_per_device_hour=0.83, input_usd_per_mtok=1.0,
                     output_usd_per_mtok=0.0, context_limit=1 << 20)
    frame = _frame([dict(input_tokens=3_650_000), dict(input_tokens=1_000_000, ttft=99.0)])
    s = score(frame, dep, window_s=3600, max_overflow_share=0.01, targets=Targets(tau_first_s=4.1, tau_token_s=0.0235))
    assert s.cost_usd == pytest.approx(0.83) and s.qualified_usd == pytest.approx(3.65)
    assert round(s.D, 2) == 4.40 and s.G == pytest.approx(4.65 / 0.83) and s.f == pytest.approx(3.65 / 4.65)


def test_only_completed_in_window_count():
    frame = _frame([
        {},                                      # qualified
        dict(ttft=5.0),                          # completed, misses tau_first
        dict(tpot=0.05),                         # completed, misses tau_token
        dict(ok=False),                          # malformed: never counts
        dict(ttft=math.nan),                     # no first token: never counts
        dict(tpot=math.inf),                     # non-finite TPOT
        dict(in_window=False),                   # warmup or after the window
    ])
    t = Targets(tau_first_s=4.1, tau_token_s=0.0235)
    s = score(frame, DEP, window_s=1800, max_overflow_share=0.01, targets=t)
    v = request_value(1000, 100, DEP)
    cost = 2 * 0.82 * 1800 / 3600
    assert s.completed == 3 and s.qualified == 1 and s.failed == 1 and s.requests_in_window == 6
    assert s.D == pytest.approx(v / cost) and s.G == pytest.approx(3 * v / cost)
    assert s.f == pytest.approx(1 / 3)
    no_targets = score(frame, DEP, window_s=1800, max_overflow_share=0.01)
    assert no_targets.D is None and no_targets.G == pytest.approx(s.G)


def test_context_overflows_above_the_share_invalidate_the_run():
    """AgentX marks a run invalid above 1% context overflows: D = 0, with the reason; at the share it stays valid."""
    t = Targets(tau_first_s=4.1, tau_token_s=0.0235)
    overflow = dict(ok=False, ttft=math.nan, tpot=math.nan, context_overflow=True)
    at_limit = score(_frame([{}] * 99 + [overflow]), DEP, window_s=1800, max_overflow_share=0.01, targets=t)
    assert at_limit.valid and at_limit.context_overflows == 1 and at_limit.D > 0
    over = score(_frame([{}] * 98 + [overflow] * 2), DEP, window_s=1800, max_overflow_share=0.01, targets=t)
    assert not over.valid and over.D == 0.0 and over.G > 0
    assert over.overflow_share == pytest.approx(0.02) and "2 of 100 requests" in over.invalid_reason
    warmup_only = score(_frame([{}] * 10 + [overflow | dict(in_window=False)] * 5), DEP, window_s=1800,
                        max_overflow_share=0.01, targets=t)
    assert warmup_only.valid and warmup_only.context_overflows == 0


def _sessions_frame(values_usd: list[float], requests_per_session: int = 2, **cols) -> pd.DataFrame:
    """Session instances whose completed requests are worth ``values_usd`` (input tokens at USD 1 per M)."""
    rows = []
    for i, v in enumerate(values_usd):
        for _ in range(requests_per_session):
            rows.append(dict(instance=i, input_tokens=v * 1e6 / requests_per_session, output_tokens=0, **cols))
    return _frame(rows)


def test_bootstrap_intervals_resample_sessions():
    from infbench.serving.uncertainty import UncertaintySettings, spread

    dep = Deployment(name="u", devices=1, accelerator="cpu", usd_per_device_hour=3600.0, input_usd_per_mtok=1.0,
                     output_usd_per_mtok=0.0, context_limit=1 << 20)   # cost = window_s USD: D = USD per second
    t = Targets(tau_first_s=4.1, tau_token_s=0.0235)
    settings = UncertaintySettings(bootstrap_resamples=4000, seed=0, min_completed_requests=30)
    equal = _sessions_frame([1.0] * 20)
    s = spread([equal], [score(equal, dep, 1.0, 0.01, t)], dep, t, settings, "equal")
    assert s.d_ci95_low == pytest.approx(20.0) and s.d_ci95_high == pytest.approx(20.0)   # no spread, no width
    assert s.sessions == 20 and s.completed_timed_requests == 40

    few, many = (_sessions_frame([0.5, 1.5] * n) for n in (5, 500))   # sessions worth 1 +- 0.5 USD
    wide = spread([few], [score(few, dep, 1.0, 0.01, t)], dep, t, settings, "few")
    narrow = spread([many], [score(many, dep, 1.0, 0.01, t)], dep, t, settings, "many")
    for frame, sp in ((few, wide), (many, narrow)):
        D = score(frame, dep, 1.0, 0.01, t).D
        assert sp.d_ci95_low < D < sp.d_ci95_high and sp.g_ci95_low < D < sp.g_ci95_high   # all qualify: G = D
        # the normal approximation: +- 1.96 sigma sqrt(n) around D = n
        assert sp.d_ci95_high - sp.d_ci95_low == pytest.approx(2 * 1.96 * 0.5 * np.sqrt(D), rel=0.15)
    slow = _sessions_frame([1.0] * 20, ttft=9.0)          # nothing qualifies: D = 0 in every resample, G does not
    s = spread([slow], [score(slow, dep, 1.0, 0.01, t)], dep, t, settings, "slow")
    assert s.d_ci95_high == 0.0 and s.g_ci95_low == pytest.approx(20.0)
    # the mean over seeds: a second, worthless replay halves D and its interval
    empty = _sessions_frame([1.0] * 20, ttft=9.0)
    two = spread([equal, empty], [score(f, dep, 1.0, 0.01, t) for f in (equal, empty)], dep, t, settings, "two")
    assert two.d_ci95_low == pytest.approx(10.0) and two.sessions == 40


def test_a_row_under_the_request_minimum_says_so():
    from infbench.serving.uncertainty import Spread
    from infbench.tables.serving import counts_note, d_at_c

    frame = _frame([{}] * 3)
    s = score(frame, DEP, 30.0, 0.01, Targets(tau_first_s=4.1, tau_token_s=0.0235))
    spread = Spread(d_ci95_low=0.0, d_ci95_high=0.2, g_ci95_low=0.0, g_ci95_high=0.3, sessions=3,
                    completed_timed_requests=3)
    assert d_at_c(0.061, 1, [s], spread, 30).startswith("too few requests: 3 completed timed requests < 30")
    assert d_at_c(0.061, 1, [s], spread.model_copy(update={"completed_timed_requests": 30}), 30) == \
        "0.061 [0, 0.2] @1"
    frame["counts_from_token_ids"] = [True, False, True]
    assert counts_note([frame]) == "unverified counts (1 of 3 completed requests without token ids)"
    frame["counts_from_token_ids"] = True
    assert counts_note([frame]) == "token ids"
