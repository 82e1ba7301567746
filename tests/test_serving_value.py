"""Dollars per dollar (PROTOCOL B2) on hand-made request records."""

import math

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
