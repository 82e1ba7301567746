"""Closed-loop replay of a hand-built trace against a real local server on loopback."""

import json
import time

import httpx
import pytest
from serving_helpers import instant_server, settings

from infbench.serving import replay, request_records, workload
from infbench.serving.traces import weka

BS = 4
HAND = {
    "id": "hand",
    "block_size": BS,
    "requests": [
        {"t": 0, "in": 8, "out": 3, "hash_ids": [0, 1], "think_time": 0},  # main/0
        {
            "type": "subagent",
            "requests": [  # main.s0: fan-out 1
                {"t": 1, "in": 8, "out": 2, "hash_ids": [0, 2], "think_time": 0.2},
                {"t": 2, "in": 10, "out": 2, "hash_ids": [0, 2, 3], "think_time": 0.1},
            ],
        },
        {
            "type": "subagent",
            "requests": [  # main.s1: fan-out 2
                {"t": 1, "in": 8, "out": 2, "hash_ids": [0, 4], "think_time": 0.3}
            ],
        },
        {"t": 3, "in": 12, "out": 3, "hash_ids": [0, 1, 5], "think_time": 0.5},  # main/1 joins both
        {"t": 40, "in": 16, "out": 2, "hash_ids": [0, 1, 5, 6], "think_time": 30.0},  # main/2 after a 30 s gap
        {
            "type": "subagent",
            "requests": [  # main.s2: background
                {"t": 41, "in": 8, "out": 2, "hash_ids": [0, 7], "think_time": 0.1}
            ],
        },
    ],
}
SPT = 0.05  # the server's seconds per output token, so requests take measurable time


def test_hand_trace_structure():
    s = weka.session(HAND)
    chains = {c.id: c for c in s.chains}
    deps = {r.id: set(r.depends_on) for r in s.requests}
    assert deps["main/1"] == {"main/0", "main.s0/1", "main.s1/0"}
    assert deps["main.s0/0"] == {"main/0"} and deps["main.s1/0"] == {"main/0"}
    assert deps["main.s2/0"] == {"main/2"}
    assert chains["main.s0"].joined_by == "main/1" and chains["main.s1"].joined_by == "main/1"
    assert chains["main.s2"].background and not chains["main.s0"].background


@pytest.mark.slow
def test_hand_trace_replay(tmp_path):
    session = weka.session(HAND)
    with instant_server(tmp_path / "server.log", "--seconds-per-token", str(SPT)) as base:
        t = time.monotonic()
        st = settings(base, window_s=13.5, request_timeout_s=5.0)
        recs = replay.run(workload.draw([session], 0), st)
        elapsed = time.monotonic() - t
        received = httpx.get(base + "/debug/requests").json()
    assert elapsed < 13.5 + 5.0 + 2.0
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    first = [r for r in recs if r.instance == 0]
    by_id = {r.request_id: r for r in first}
    assert set(by_id) == {r.id for r in session.requests}

    # send order: main/0, the two subagents of the fan-out, then the join, the gap, the background subagent
    order = [r.request_id for r in sorted(first, key=lambda r: r.send_time)]
    assert order[0] == "main/0"
    assert order.index("main.s0/0") < order.index("main.s0/1") < order.index("main/1")
    assert order.index("main.s1/0") < order.index("main/1") < order.index("main/2") < order.index("main.s2/0")

    # every request waits for all it depends on, then exactly its recorded delay (idle cap aside)
    for r in session.requests:
        if not r.depends_on:
            continue
        after = max(by_id[d].end_time for d in r.depends_on)
        gap = by_id[r.id].send_time - after
        want = min(r.delay_s, 10.0)
        assert want - 0.005 <= gap <= want + 0.1, (r.id, gap, want)
    # the two fan-out branches overlap in time
    s0, s1 = (by_id["main.s0/0"], by_id["main.s0/1"]), by_id["main.s1/0"]
    assert s0[0].send_time < s1.end_time and s1.send_time < s0[1].end_time
    # the 30 s gap with nothing in flight was capped at 10 s
    assert 9.9 <= by_id["main/2"].send_time - by_id["main/1"].end_time <= 10.1
    # the background subagent is not joined, but the lane waits for it before the next session
    nxt = [r for r in recs if r.instance == 1]
    assert nxt and min(r.send_time for r in nxt) >= by_id["main.s2/0"].end_time

    # TTFT, TPOT and token accounting come from the stream
    m1 = by_id["main/1"]
    assert m1.output_tokens == 3 and m1.streamed_token_ids == [0, 1, 2] and m1.usage_completion_tokens == 3
    assert 0 < m1.ttft < 0.1 and abs(m1.tpot - SPT) < 0.03

    # prompts: what the server received is what the builder makes; equal hash ids give equal blocks
    builder = st.prompt_builder()
    built = {
        (r.instance, r.request_id): builder.build(session, r.instance, req)
        for r in recs
        for req in session.requests
        if req.id == r.request_id
    }
    assert sorted(map(json.dumps, built.values())) == sorted(json.dumps(x["prompt"]) for x in received)
    p = {rid: built[(0, rid)] for _, rid in built if _ == 0}
    block = lambda ids, i: ids[i * BS : (i + 1) * BS]  # noqa: E731
    assert block(p["main/0"], 1) == block(p["main/1"], 1) == block(p["main/2"], 1)  # hash 1
    assert block(p["main.s0/0"], 1) == block(p["main.s0/1"], 1)  # hash 2
    assert block(p["main.s0/0"], 1) != block(p["main.s1/0"], 1)  # hash 2 vs 4
    assert block(p["main/1"], 2) == block(p["main/2"], 2)  # hash 5
    assert all(len(p[r.id]) == r.input_tokens for r in session.requests)
    # one marker per session instance: shared inside it, different from the next instance, whose blocks are
    # drawn anew (a second instance of a session shares its structure, not its ids: nothing to answer from
    # a memo)
    assert len({tuple(x[:2]) for x in p.values()}) == 1
    other = built[(1, "main/0")]
    assert other[:2] != p["main/0"][:2] and block(other, 1) != block(p["main/0"], 1)
    # the same content seed gives the same prompts; another seed other ids
    assert st.prompt_builder().build(session, 0, session.requests[0]) == p["main/0"]
    assert settings(base, seed=1).prompt_builder().build(session, 0, session.requests[0]) != p["main/0"]


@pytest.mark.slow
def test_concurrency_bounds_top_level_sessions(tmp_path):
    """c=2 lanes: at most 2 session instances active at any moment, subagents not counted."""
    session = weka.session(HAND)
    # 0.2 s per token: a subagent's request outlives the 0.1 s gap before its sibling's, so the
    # two fan-out branches overlap whatever the machine's load
    with instant_server(tmp_path / "server.log", "--seconds-per-token", "0.2") as base:
        recs = replay.run(workload.draw([session], 1), settings(base, concurrency=2, window_s=8.0, idle_cap_s=0.5))
    spans = {}
    for r in recs:
        lo, hi = spans.get(r.instance, (r.send_time, r.end_time))
        spans[r.instance] = (min(lo, r.send_time), max(hi, r.end_time))
    for t in [lo for lo, _ in spans.values()]:
        active = sum(lo <= t < hi for lo, hi in spans.values())
        assert active <= 2
    in_flight_max = max(sum(r.send_time <= q.send_time < r.end_time for r in recs) for q in recs)
    assert in_flight_max >= 3  # subagent branches ran alongside the two main chains


@pytest.mark.slow
def test_a_lane_reuses_its_keep_alive_connection(tmp_path):
    """Sequential requests of one lane travel over one connection (a response read only up to [DONE]
    used to close it, so every request paid a new TCP handshake inside its TTFT)."""
    chain = {
        "id": "chain",
        "block_size": 16,
        "requests": [
            {"t": 0.0, "in": 32 * (k + 1), "out": 4, "hash_ids": list(range(2 * (k + 1))), "think_time": 0.05 * (k > 0)}
            for k in range(6)
        ],
    }
    with instant_server(tmp_path / "server.log") as base:
        recs = replay.run(workload.draw([weka.session(chain)], 0), settings(base, window_s=1.0))
        received = httpx.get(base + "/debug/requests").json()
    assert len(recs) >= 6 and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    assert len({r["client_port"] for r in received}) == 1


def test_replay_records_have_a_declared_schema(tmp_path):
    """Even a replay that completed nothing writes typed columns (a reader never sees nulls-only types)."""
    import pyarrow.parquet as pq

    request_records.write_records([], str(tmp_path / "empty.parquet"))
    schema = pq.read_schema(tmp_path / "empty.parquet")
    assert list(schema.names) == list(request_records.RequestRecord.model_fields)
    assert schema.equals(request_records.RECORD_SCHEMA)


def test_lane_start_skips_what_was_recorded_before_the_sampled_point():
    s = weka.session(HAND)
    start = workload.lane_start(s, 0.5)  # main chain main/0, main/1, main/2: floor(0.5 * 3) = 1
    assert start.t_star == 3 and start.skipped == {"main/0", "main.s0/0", "main.s0/1", "main.s1/0"}
    assert [r.id for r in s.requests if start.ready(r)] == ["main/1"]
    assert workload.initial_streams(s, start) == 1
    assert workload.lane_start(s, 0.99).skipped == {r.id for r in s.requests if r.t < 40}  # never past the last
    assert not workload.lane_start(s, 0.0).skipped
    assert workload.initial_streams(s, workload.FROM_BEGINNING) == 1
    fractions = [workload.start_fraction(7, lane, (0.25, 0.75)) for lane in range(50)]
    assert all(0.25 <= u <= 0.75 for u in fractions) and len(set(fractions)) == 50
    assert fractions == [workload.start_fraction(7, lane, (0.25, 0.75)) for lane in range(50)]
    assert workload.start_fraction(7, 3, (0.0, 0.0)) == 0.0


@pytest.mark.slow
def test_a_lane_starts_its_first_session_at_the_sampled_point(tmp_path):
    """start_ratio (0.5, 0.5): the lane's first instance sends main/1 at once with its full grown prompt (what came
    before counts as done), then the rest; the lane's next instance starts from main/0."""
    with instant_server(tmp_path / "server.log") as base:
        recs = replay.run(
            workload.draw([weka.session(HAND)], 0), settings(base, window_s=3.0, idle_cap_s=0.2, start_ratio=(0.5, 0.5))
        )
    first = [r for r in recs if r.instance == 0]
    assert [r.request_id for r in first] == ["main/1", "main/2", "main.s2/0"]
    assert first[0].send_time < 0.5 and first[0].input_tokens == 12
    assert {r.instance_requests for r in first} == {3} and all(r.ok for r in first)
    second = [r for r in recs if r.instance == 1]
    assert second and second[0].request_id == "main/0" and {r.instance_requests for r in second} == {7}


def test_coverage_counts_the_streams_ready_at_the_lanes_start_points():
    from infbench.serving import coverage

    s = weka.session(HAND)
    at_start = coverage.draw_stats([s], seed=3, n=4, concurrency=2, start_ratio=(0.0, 0.0), seed_set="x")
    assert at_start.initial_streams == 2 and at_start.requests == 4 * 7  # one main chain ready per lane
    # fraction 0.4: main request floor(0.4 * 3) = 1 at t* = 3, after the fan-out: main/1 alone is ready
    mid = coverage.draw_stats([s], seed=3, n=4, concurrency=2, start_ratio=(0.4, 0.4), seed_set="x")
    assert mid.initial_streams == 2
    fanout = weka.session(
        {
            "id": "fan",
            "block_size": BS,
            "requests": [
                {"t": 0, "in": 8, "out": 2, "hash_ids": [0, 1], "think_time": 0},
                {
                    "type": "subagent",
                    "requests": [
                        {"t": 1, "in": 8, "out": 2, "hash_ids": [0, 2], "think_time": 0},
                        {"t": 5, "in": 8, "out": 2, "hash_ids": [0, 2], "think_time": 0},
                    ],
                },
                {
                    "type": "subagent",
                    "requests": [
                        {"t": 1, "in": 8, "out": 2, "hash_ids": [0, 3], "think_time": 0},
                        {"t": 5, "in": 8, "out": 2, "hash_ids": [0, 3], "think_time": 0},
                    ],
                },
                {"t": 4, "in": 12, "out": 2, "hash_ids": [0, 1, 4], "think_time": 0},
                {"t": 9, "in": 12, "out": 2, "hash_ids": [0, 1, 4], "think_time": 0},
            ],
        }
    )
    # starting at main/1 (t* = 4): both branches' second requests are still to come and ready, main/1 waits for them
    start = workload.lane_start(fanout, 0.5)
    assert start.t_star == 4 and workload.initial_streams(fanout, start) == 2


def test_a_window_ending_while_the_loop_computes_its_wait_ends_the_replay():
    """The loop tests the clock, then computes how long to wait; on a loaded machine the window can end in
    between, with nothing due and one request in flight. That ends the replay (it once popped the empty
    event heap: IndexError, a crashed verification of an honest server)."""
    import asyncio

    session = weka.session(
        {"id": "one", "block_size": BS, "requests": [{"t": 0, "in": 8, "out": 2, "hash_ids": [0, 1], "think_time": 0}]}
    )
    st = settings("http://127.0.0.1:9", window_s=5.0, request_timeout_s=1.0)

    class LateClock(replay.Replay):
        """Time stands still until a request is in flight; then the loop's test reads just before the
        window's end and every later reading just after it, so the wait comes out negative."""

        readings = [4.999]

        def now(self) -> float:
            if self.in_flight == 0 and not self.records:
                return 0.0
            return self.readings.pop() if self.readings else 5.001

    recs = asyncio.run(LateClock(workload.draw([session], 0), st).run())
    assert len(recs) == 1 and not recs[0].ok
