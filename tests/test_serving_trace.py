"""Trace readers (AgentX/Weka, Mooncake), their errors, the synthetic generator and workload preparation."""

import json

import pytest

from infbench.errors import ConfigError, InputFileError
from infbench.serving import synthetic, trace, workload

SYN = dict(sessions=24, block_size=64, system_tokens=1024, first_user_tokens={"median": 200, "sigma": 0.8},
           main_turns_mean=6, max_main_turns=30, tool_result_tokens={"median": 300, "sigma": 1.2},
           output_tokens={"median": 100, "sigma": 1.0}, max_output_tokens=2048,
           think_time_s={"median": 2.0, "sigma": 1.5}, subagent_prob=0.3, max_fanout=3, subagent_turns_mean=3,
           background_prob=0.5, nominal_decode_tps=50)


def _write(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _req(t, n_in, out, ids, think=0.0):
    return {"t": t, "in": n_in, "out": out, "hash_ids": ids, "think_time": think}


def test_weka_nested_subagents_and_background(tmp_path):
    obj = {"id": "a", "block_size": 2, "requests": [
        _req(0, 4, 1, [0, 1]),
        {"type": "subagent", "requests": [
            _req(1, 4, 1, [0, 2], 0.5),
            {"type": "subagent", "requests": [_req(2, 4, 1, [0, 3], 0.1)]},     # nested, joined by its parent's next
            _req(3, 6, 1, [0, 2, 4], 0.2)]},
        {"type": "subagent", "requests": [_req(1, 4, 1, [0, 5])]}]}          # no later main request: background
    (s,) = trace.read_weka(_write(tmp_path / "t.jsonl", [obj]))
    deps = {r.id: r.depends_on for r in s.requests}
    assert deps["main.s0/0"] == ["main/0"] and deps["main.s0.s0/0"] == ["main.s0/0"]
    assert deps["main.s0/1"] == ["main.s0/0", "main.s0.s0/0"]
    chains = {c.id: c for c in s.chains}
    assert chains["main.s0"].background and chains["main.s1"].background
    assert not chains["main.s0.s0"].background
    assert {r.id: r.delay_s for r in s.requests}["main.s0/0"] == 0.5
    assert s.max_context == 7 and s.n_subagents == 3


@pytest.mark.parametrize("line, needle", [
    ('{"id": "x", "block_size": 64, "requests": [', "line 2: malformed JSON"),
    ({"id": "x", "block_size": 64, "requests": [_req(0, 10, 1, [0]) | {"colour": 1}]}, "colour"),
    ({"id": "x", "block_size": 64, "requests": [_req(0, 10, 0, [0])]}, "out"),
    ({"id": "x", "block_size": 4, "requests": [_req(0, 4, 1, [0, 1, 2])]}, "3 hash ids for 4 input tokens"),
    ({"id": "x", "requests": [_req(0, 4, 1, [0])]}, "block_size"),
    ({"id": "x", "block_size": 4, "requests": [{"type": "subagent", "requests": []}]}, "requests"),
    ([1, 2], "expected a JSON object"),
])
def test_weka_bad_input_names_file_and_line(tmp_path, line, needle):
    good = {"id": "ok", "block_size": 4, "requests": [_req(0, 4, 1, [0])]}
    path = _write(tmp_path / "bad.jsonl", [good, line])
    with pytest.raises(InputFileError) as err:
        trace.read_weka(path)
    assert str(path) in str(err.value) and "line 2" in str(err.value) and needle in str(err.value)


def test_duplicate_trace_ids(tmp_path):
    good = {"id": "ok", "block_size": 4, "requests": [_req(0, 4, 1, [0])]}
    with pytest.raises(InputFileError, match="duplicate trace id"):
        trace.read_weka(_write(tmp_path / "d.jsonl", [good, good]))


def test_session_model_rejects_cycles_and_dangling_deps():
    def req(rid, deps):
        return {"id": rid, "chain": "main", "t": 0, "input_tokens": 4, "output_tokens": 1, "hash_ids": [0],
                "depends_on": deps, "delay_s": 0}
    base = {"id": "s", "block_size": 4, "chains": [{"id": "main", "kind": "main", "requests": ["a", "b"]}]}
    with pytest.raises(ValueError, match="dependency cycle"):
        trace.Session.model_validate(base | {"requests": [req("a", ["b"]), req("b", ["a"])]})
    with pytest.raises(ValueError, match="unknown request zz"):
        trace.Session.model_validate(base | {"requests": [req("a", []), req("b", ["zz"])]})


def test_mooncake(tmp_path):
    path = _write(tmp_path / "m.jsonl", [
        {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]}])
    s = trace.read_mooncake(path)
    assert [x.requests[0].t for x in s] == [0.0, 1.5] and s[0].prefix_scope == "global"
    b = workload.PromptBuilder(token_low=10, token_high=100, marker_tokens=1, run_key="r")
    p0, p1 = b.build(s[0], 0, s[0].requests[0]), b.build(s[1], 0, s[1].requests[0])
    assert p0[1:512] == p1[1:512] and len(p1) == 1100   # global hash ids: shared across lines
    with pytest.raises(InputFileError, match="line 1: .*input_length"):
        trace.read_mooncake(_write(tmp_path / "bad.jsonl", [{"timestamp": 0, "output_length": 1, "hash_ids": []}]))


def test_synthetic_is_seeded_and_readable(tmp_path):
    p = synthetic.SyntheticParams(**SYN)
    synthetic.generate(p, 7, tmp_path / "a.jsonl")
    synthetic.generate(p, 7, tmp_path / "b.jsonl")
    synthetic.generate(p, 8, tmp_path / "c.jsonl")
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert (tmp_path / "a.jsonl").read_text() != (tmp_path / "c.jsonl").read_text()
    sessions = trace.read_weka(tmp_path / "a.jsonl")
    assert len(sessions) == 24
    assert any(c.background for s in sessions for c in s.chains)
    assert any(sum(c.joined_by == r.id for c in s.chains) >= 2 for s in sessions for r in s.requests)  # fan-out
    main = [r for r in sessions[0].requests if r.chain == "main"]
    for a, b in zip(main, main[1:]):   # growing shared context
        assert b.input_tokens > a.input_tokens and b.hash_ids[: a.input_tokens // 64] == a.hash_ids[: a.input_tokens // 64]


def test_prepare_scales_filters_whole_sessions(tmp_path):
    synthetic.generate(synthetic.SyntheticParams(**SYN), 0, tmp_path / "t.jsonl")
    raw = trace.read_weka(tmp_path / "t.jsonl")
    limit = sorted(s.max_context for s in raw)[12] // 8
    summary = workload.prepare(str(tmp_path / "t.jsonl"), "weka", length_scale=0.125, context_limit=limit,
                               block_size=512, out_sessions=str(tmp_path / "w.jsonl"),
                               out_summary=str(tmp_path / "w.json"))
    kept = workload.load(tmp_path / "w.jsonl")
    assert summary.sessions_eligible == len(kept) and 0 < len(kept) < 24 and summary.length_scale == 0.125
    orig = {s.id: s for s in raw}
    for s in kept:
        assert s.block_size == 8 and s.max_context <= limit
        assert len(s.requests) == len(orig[s.id].requests)   # whole sessions, never truncated
    with pytest.raises(ConfigError, match="length_scale"):
        workload.scale(raw[0], 0.3)
    with pytest.raises(ConfigError, match="context_limit"):
        workload.prepare(str(tmp_path / "t.jsonl"), "weka", length_scale=1.0, context_limit=10, block_size=512,
                         out_sessions=str(tmp_path / "x.jsonl"), out_summary=str(tmp_path / "x.json"))
    assert not (tmp_path / "x.jsonl").exists()


def test_draws_and_seed_sets():
    sessions = [trace.session_from_weka({"id": str(i), "block_size": 4, "requests": [_req(0, 4, 1, [0])]})
                for i in range(5)]
    take = lambda seed: [next(g).id for g in [workload.draw(sessions, seed)] for _ in range(12)]  # noqa: E731
    a = take(1)
    assert a == take(1) and a != take(2) and sorted(a[:5]) == sorted(a[5:10])
    workload.check_disjoint({"development": [0, 1], "final": [2, 3]})
    with pytest.raises(ConfigError, match="serving.seeds.final"):
        workload.check_disjoint({"development": [0, 1], "final": [1, 3]})
