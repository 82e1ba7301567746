"""The session model, the synthetic generator and workload preparation (the format readers: test_serving_traces)."""

import pytest

from infbench.errors import ConfigError
from infbench.serving import synthetic, workload
from infbench.serving.sessions import Session
from infbench.serving.traces import weka

SYN = dict(
    sessions=24,
    block_size=64,
    system_tokens=1024,
    first_user_tokens={"median": 200, "sigma": 0.8},
    main_turns_mean=6,
    max_main_turns=30,
    tool_result_tokens={"median": 300, "sigma": 1.2},
    output_tokens={"median": 100, "sigma": 1.0},
    max_output_tokens=2048,
    think_time_s={"median": 2.0, "sigma": 1.5},
    subagent_prob=0.3,
    max_fanout=3,
    subagent_turns_mean=3,
    background_prob=0.5,
    nominal_decode_tps=50,
)


def _req(t, n_in, out, ids, think=0.0):
    return {"t": t, "in": n_in, "out": out, "hash_ids": ids, "think_time": think}


def test_session_model_rejects_cycles_and_dangling_deps():
    def req(rid, deps):
        return {
            "id": rid,
            "chain": "main",
            "t": 0,
            "input_tokens": 4,
            "output_tokens": 1,
            "hash_ids": [0],
            "depends_on": deps,
            "delay_s": 0,
        }

    base = {"id": "s", "block_size": 4, "chains": [{"id": "main", "kind": "main", "requests": ["a", "b"]}]}
    with pytest.raises(ValueError, match="dependency cycle"):
        Session.model_validate(base | {"requests": [req("a", ["b"]), req("b", ["a"])]})
    with pytest.raises(ValueError, match="unknown request zz"):
        Session.model_validate(base | {"requests": [req("a", []), req("b", ["zz"])]})


def test_synthetic_is_seeded_and_readable(tmp_path):
    p = synthetic.SyntheticParams(**SYN)
    synthetic.generate(p, 7, tmp_path / "a.jsonl")
    synthetic.generate(p, 7, tmp_path / "b.jsonl")
    synthetic.generate(p, 8, tmp_path / "c.jsonl")
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert (tmp_path / "a.jsonl").read_text() != (tmp_path / "c.jsonl").read_text()
    sessions = weka.read(tmp_path / "a.jsonl")
    assert len(sessions) == 24
    assert any(c.background for s in sessions for c in s.chains)
    assert any(sum(c.joined_by == r.id for c in s.chains) >= 2 for s in sessions for r in s.requests)  # fan-out
    main = [r for r in sessions[0].requests if r.chain == "main"]
    for a, b in zip(main, main[1:]):  # growing shared context
        assert (
            b.input_tokens > a.input_tokens and b.hash_ids[: a.input_tokens // 64] == a.hash_ids[: a.input_tokens // 64]
        )


def test_prepare_scales_filters_whole_sessions(tmp_path):
    synthetic.generate(synthetic.SyntheticParams(**SYN), 0, tmp_path / "t.jsonl")
    raw = weka.read(tmp_path / "t.jsonl")
    limit = sorted(s.max_context for s in raw)[12] // 8
    summary = workload.prepare(
        str(tmp_path / "t.jsonl"),
        "weka",
        length_scale=0.125,
        context_limit=limit,
        block_size=512,
        out_sessions=str(tmp_path / "w.jsonl"),
        out_summary=str(tmp_path / "w.json"),
    )
    kept = workload.load(tmp_path / "w.jsonl")
    assert summary.sessions_eligible == len(kept) and 0 < len(kept) < 24 and summary.length_scale == 0.125
    orig = {s.id: s for s in raw}
    for s in kept:
        assert s.block_size == 8 and s.max_context <= limit
        assert len(s.requests) == len(orig[s.id].requests)  # whole sessions, never truncated
    with pytest.raises(ConfigError, match="length_scale"):
        workload.scale(raw[0], 0.3)
    with pytest.raises(ConfigError, match="context_limit"):
        workload.prepare(
            str(tmp_path / "t.jsonl"),
            "weka",
            length_scale=1.0,
            context_limit=10,
            block_size=512,
            out_sessions=str(tmp_path / "x.jsonl"),
            out_summary=str(tmp_path / "x.json"),
        )
    assert not (tmp_path / "x.jsonl").exists()


def test_draws_and_seed_sets():
    sessions = [weka.session({"id": str(i), "block_size": 4, "requests": [_req(0, 4, 1, [0])]}) for i in range(5)]
    take = lambda seed: [next(g).id for g in [workload.draw(sessions, seed)] for _ in range(12)]  # noqa: E731
    a = take(1)
    assert a == take(1) and a != take(2) and sorted(a[:5]) == sorted(a[5:10])
    workload.check_disjoint({"development": [0, 1], "final": [2, 3]})
    with pytest.raises(ConfigError, match="serving.seeds.final"):
        workload.check_disjoint({"development": [0, 1], "final": [1, 3]})
