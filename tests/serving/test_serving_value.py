"""Dollars per dollar (PROTOCOL B2) on hand-made request records."""

import math

import numpy as np
import pandas as pd
import pytest

from infbench.config.model import Deployment
from infbench.serving.value import (
    Targets,
    deadline_mask,
    qualified_mask,
    request_value,
    score,
)

DEP = Deployment(
    name="d",
    devices=2,
    accelerator="gpu",
    usd_per_device_hour=0.82,
    input_usd_per_mtok=0.1044,
    output_usd_per_mtok=0.1855,
    context_limit=1 << 20,
)


def _frame(rows):
    """Records; each token arrives on the schedule its TTFT and TPOT say unless ``token_arrivals`` is given."""
    cols = dict(
        in_window=True, ok=True, ttft=1.0, tpot=0.01, input_tokens=1000, output_tokens=100, context_overflow=False
    )
    rows = [cols | r for r in rows]
    for r in rows:
        r.setdefault("token_arrivals", [r["ttft"] + i * r["tpot"] for i in range(r["output_tokens"])])
    return pd.DataFrame(rows)


def test_value_per_request():
    assert request_value(1_000_000, 0, DEP) == pytest.approx(0.1044)
    assert request_value(2_000_000, 1_000_000, DEP) == pytest.approx(2 * 0.1044 + 0.1855)


def test_worked_example():
    """USD 3.65 qualified over USD 0.83 of GPU cost = 4.40."""
    dep = Deployment(
        name="w",
        devices=1,
        accelerator="gpu",
        usd_per_device_hour=0.83,
        input_usd_per_mtok=1.0,
        output_usd_per_mtok=0.0,
        context_limit=1 << 20,
    )
    frame = _frame([dict(input_tokens=3_650_000), dict(input_tokens=1_000_000, ttft=99.0)])
    s = score(frame, dep, window_s=3600, max_overflow_share=0.01, targets=Targets(tau_first_s=4.1, tau_token_s=0.0235))
    assert s.cost_usd == pytest.approx(0.83) and s.qualified_usd == pytest.approx(3.65)
    assert round(s.D, 2) == 4.40 and s.G == pytest.approx(4.65 / 0.83) and s.f == pytest.approx(3.65 / 4.65)


def test_only_completed_in_window_count():
    frame = _frame(
        [
            {},  # qualified
            dict(ttft=5.0),  # completed, misses tau_first
            dict(tpot=0.05),  # completed, misses tau_token
            dict(ok=False),  # malformed: never counts
            dict(ttft=math.nan),  # no first token: never counts
            dict(tpot=math.inf),  # non-finite TPOT
            dict(in_window=False),  # warmup or after the window
        ]
    )
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
    warmup_only = score(
        _frame([{}] * 10 + [overflow | dict(in_window=False)] * 5),
        DEP,
        window_s=1800,
        max_overflow_share=0.01,
        targets=t,
    )
    assert warmup_only.valid and warmup_only.context_overflows == 0


def _sessions_frame(values_usd: list[float], requests_per_session: int = 2, **cols) -> pd.DataFrame:
    """Session instances whose completed requests are worth ``values_usd`` (input tokens at USD 1 per M)."""
    rows = []
    for i, v in enumerate(values_usd):
        for _ in range(requests_per_session):
            rows.append(dict(instance=i, input_tokens=v * 1e6 / requests_per_session, output_tokens=0, **cols))
    return _frame(rows)


def test_bootstrap_intervals_resample_sessions():
    from infbench.config.model import UncertaintySettings
    from infbench.serving.uncertainty import spread

    dep = Deployment(
        name="u",
        devices=1,
        accelerator="cpu",
        usd_per_device_hour=3600.0,
        input_usd_per_mtok=1.0,
        output_usd_per_mtok=0.0,
        context_limit=1 << 20,
    )  # cost = window_s USD: D = USD per second
    t = Targets(tau_first_s=4.1, tau_token_s=0.0235)
    settings = UncertaintySettings(bootstrap_resamples=4000, seed=0, min_completed_requests=30)
    equal = _sessions_frame([1.0] * 20)
    s = spread([equal], [score(equal, dep, 1.0, 0.01, t)], dep, t, settings, "equal")
    assert s.d_ci95_low == pytest.approx(20.0) and s.d_ci95_high == pytest.approx(20.0)  # no spread, no width
    assert s.sessions == 20 and s.completed_timed_requests == 40

    few, many = (_sessions_frame([0.5, 1.5] * n) for n in (5, 500))  # sessions worth 1 +- 0.5 USD
    wide = spread([few], [score(few, dep, 1.0, 0.01, t)], dep, t, settings, "few")
    narrow = spread([many], [score(many, dep, 1.0, 0.01, t)], dep, t, settings, "many")
    for frame, sp in ((few, wide), (many, narrow)):
        D = score(frame, dep, 1.0, 0.01, t).D
        assert sp.d_ci95_low < D < sp.d_ci95_high and sp.g_ci95_low < D < sp.g_ci95_high  # all qualify: G = D
        # the normal approximation: +- 1.96 sigma sqrt(n) around D = n
        assert sp.d_ci95_high - sp.d_ci95_low == pytest.approx(2 * 1.96 * 0.5 * np.sqrt(D), rel=0.15)
    slow = _sessions_frame([1.0] * 20, ttft=9.0)  # nothing qualifies: D = 0 in every resample, G does not
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
    spread = Spread(
        d_ci95_low=0.0, d_ci95_high=0.2, g_ci95_low=0.0, g_ci95_high=0.3, sessions=3, completed_timed_requests=3
    )
    assert d_at_c(0.061, 1, [s], spread, 30).startswith("too few requests: 3 completed timed requests < 30")
    assert d_at_c(0.061, 1, [s], spread.model_copy(update={"completed_timed_requests": 30}), 30) == "0.061 [0, 0.2] @1"
    frame["counts_from_token_ids"] = [True, False, True]
    assert counts_note([frame]) == "unverified counts (1 of 3 completed requests without token ids)"
    frame["counts_from_token_ids"] = True
    assert counts_note([frame]) == "token ids"


T = Targets(tau_first_s=0.5, tau_token_s=0.05)


def test_the_deadline_rule_reads_the_targets_as_a_schedule():
    """Token i by tau_first + i * tau_token after send; the paper's rule looks at TTFT and mean TPOT only."""
    on_time = [0.5, 0.549, 0.599, 0.649]
    frame = _frame(
        [
            dict(ttft=0.5, tpot=0.05, output_tokens=4, token_arrivals=on_time),
            dict(ttft=0.5, tpot=0.05, output_tokens=4, token_arrivals=[0.5, 0.56, 0.6, 0.65]),  # one late
            dict(ttft=0.1, tpot=0.1, output_tokens=4, token_arrivals=[0.1, 0.2, 0.3, 0.4]),  # slow, early
            dict(ttft=0.1, tpot=0.1, output_tokens=4, token_arrivals=[]),
        ]
    )  # no ids
    assert deadline_mask(frame, T).tolist() == [True, False, True, False]
    assert qualified_mask(frame, T).tolist() == [True, True, False, False]


def test_holding_tokens_back_never_meets_a_deadline_it_missed():
    """Delaying any tokens (a late first token, then a burst) can make the paper's rule qualify a request it
    failed, never the deadline rule: 2,000 random streams, each held back at random."""
    rng = np.random.default_rng(0)
    honest, held = [], []
    for _ in range(2000):
        n = int(rng.integers(2, 12))
        a = np.cumsum(rng.exponential(0.06, n)) + rng.uniform(0, 0.4)
        honest.append(a)
        held.append(np.maximum(a, a[0] + rng.uniform(0, 0.6)))  # nothing leaves before the hold ends
    before, after = (
        _frame(
            [
                dict(ttft=a[0], tpot=(a[-1] - a[0]) / (len(a) - 1), output_tokens=len(a), token_arrivals=a.tolist())
                for a in streams
            ]
        )
        for streams in (honest, held)
    )
    gained = {
        rule: int((mask(after, T) & ~mask(before, T)).sum())
        for rule, mask in (("paper", qualified_mask), ("deadline", deadline_mask))
    }
    assert gained["deadline"] == 0 and gained["paper"] > 100, gained  # paper: 248 of 2,000


@pytest.mark.slow
def test_a_burst_after_a_hold_raises_the_papers_share_not_the_deadline_rules(tmp_path):
    """Two real servers decoding at 0.1 s per token: one streams each token, one holds them all and sends them
    together. With targets of 0.5 s and 0.05 s the paper's rule qualifies only the held requests (TPOT 0); the
    deadline rule qualifies the streamed ones as well, so holding gains nothing under it."""
    from serving_helpers import instant_server, settings

    from infbench.serving import replay, request_records, workload
    from infbench.serving.traces import weka

    session = weka.session(
        {
            "id": "h",
            "block_size": 4,
            "requests": [
                {"t": 0, "in": 8, "out": 4, "hash_ids": [0, 1], "think_time": 0},
                {"t": 1, "in": 12, "out": 4, "hash_ids": [0, 1, 2], "think_time": 0.05},
            ],
        }
    )
    scores = {}
    for mode in ("ok", "hold"):
        with instant_server(tmp_path / f"{mode}.log", "--mode", mode, "--seconds-per-token", "0.1") as base:
            recs = replay.run(workload.draw([session], 0), settings(base, window_s=2.0))
        frame = request_records.write_records(recs, str(tmp_path / f"{mode}.parquet"))
        scores[mode] = score(frame, DEP, 2.0, 0.01, T)
    ok, hold = scores["ok"], scores["hold"]
    assert ok.completed > 2 and hold.completed > 2
    assert ok.p90_tpot_s > 0.09 and hold.p90_tpot_s < 0.01  # the burst: TPOT ~0
    assert ok.qualified == 0 and hold.qualified == hold.completed  # the paper's rule rewards the hold
    assert ok.deadline_qualified == ok.completed and hold.deadline_qualified == hold.completed
    assert ok.f_deadline == pytest.approx(1.0) and hold.f_deadline == pytest.approx(1.0)
