"""The trace readers (AgentX / Weka, Mooncake) on traces as their writers write them, and their errors.

The Mooncake reader is checked against the AgentX harness's own generator (``aiperf synthesize
agentic-code`` from PyPI ``agentx-harness``, installed into a venv of its own): sessions, turns and
token counts read by infbench must equal what the generator reports about its output.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infbench.errors import InputFileError
from infbench.serving import traces, workload
from infbench.serving.traces import mooncake, weka

AGENTX_HARNESS = "agentx-harness==1.0.12"


def _write(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _req(t, n_in, out, ids, think=0.0):
    return {"t": t, "in": n_in, "out": out, "hash_ids": ids, "think_time": think}


def _builder():
    return workload.PromptBuilder(token_low=10, token_high=100, marker_tokens=1, content_seed=0, concurrency=1)


# --- Weka ------------------------------------------------------------------------------------------


def test_weka_nested_subagents_and_background(tmp_path):
    obj = {
        "id": "a",
        "block_size": 2,
        "requests": [
            _req(0, 4, 1, [0, 1]),
            {
                "type": "subagent",
                "requests": [
                    _req(1, 4, 1, [0, 2], 0.5),
                    {
                        "type": "subagent",
                        "requests": [_req(2, 4, 1, [0, 3], 0.1)],
                    },  # nested, joined by its parent's next
                    _req(3, 6, 1, [0, 2, 4], 0.2),
                ],
            },
            {"type": "subagent", "requests": [_req(1, 4, 1, [0, 5])]},
        ],
    }  # no later main request: background
    (s,) = weka.read(_write(tmp_path / "t.jsonl", [obj]))
    deps = {r.id: r.depends_on for r in s.requests}
    assert deps["main.s0/0"] == ["main/0"] and deps["main.s0.s0/0"] == ["main.s0/0"]
    assert deps["main.s0/1"] == ["main.s0/0", "main.s0.s0/0"]
    chains = {c.id: c for c in s.chains}
    assert chains["main.s0"].background and chains["main.s1"].background
    assert not chains["main.s0.s0"].background
    assert {r.id: r.delay_s for r in s.requests}["main.s0/0"] == 0.5
    assert s.max_context == 7 and s.n_subagents == 3


MODEL, SMALL = "claude-opus-4-5-20251101", "claude-haiku-4-5-20251001"


def _call(t, kind, n_in, out, ids, think, api, **extra):
    """A request with every field the Weka format defines."""
    return {
        "t": t,
        "type": kind,
        "model": MODEL,
        "in": n_in,
        "out": out,
        "hash_ids": ids,
        "input_types": ["tool_result"],
        "output_types": ["text", "tool_use"],
        "stop": "tool_use",
        "api_time": api,
        "think_time": think,
        **extra,
    }


def _subagent(t, agent, requests, **extra):
    return {
        "t": t,
        "type": "subagent",
        "agent_id": agent,
        "subagent_type": "Explore",
        "duration_ms": 4000,
        "total_tokens": 900,
        "tool_use_count": 3,
        "status": "completed",
        "models": [SMALL],
        "tool_tokens": 120,
        "system_tokens": 40,
        "requests": requests,
        **extra,
    }


def _weka_dir(tmp_path):
    """Two pretty-printed session files as the harness reads them, and one JSON Lines file."""
    d = tmp_path / "weka"
    d.mkdir()
    first = {
        "id": "sess-1",
        "models": [MODEL, SMALL],
        "block_size": 64,
        "hash_id_scope": "local",
        "tool_tokens": 120,
        "system_tokens": 40,
        "totals": {"requests": 5, "input_tokens": 1500},
        "colour": "ignored: not a field of the format",
        "requests": [
            _call(100.0, "n", 200, 30, [1, 2, 3, 4], None, 1.0),
            # absolute inner times (current captures); its second request's think time is not recorded
            _subagent(
                102.0,
                "agent_001",
                [
                    _call(102.5, "s", 150, 20, [1, 2, 9], 0.5, 0.4, ttft=0.2),
                    _call(104.0, "n", 190, 0, [1, 2, 9], None, 0.5),
                ],
            ),  # out 0 is sent as 1
            _subagent(102.0, "agent_002", []),  # no requests: skipped
            _call(107.0, "s", 400, 40, [1, 2, 3, 4, 5, 6, 7], 0.5, 1.5, ttft=0.7),
            _subagent(110.0, "agent_003", [_call(0.5, "n", 100, 10, [1, 2], 0.0, None)]),  # relative t
        ],
    }
    second = {
        "id": "sess-2",
        "models": [MODEL],
        "block_size": 64,
        "hash_id_scope": "global",
        "requests": [_call(0.0, "n", 64, 8, [1], 0.0, None), _call(2.0, "n", 128, 8, [1, 2], None, 0.3)],
    }
    (d / "a.json").write_text(json.dumps(first, indent=2))
    (d / "b.json").write_text(json.dumps(second, indent=2))
    _write(d / "c.jsonl", [{"id": "sess-3", "block_size": 64, "requests": [_req(0, 64, 4, [1])]}])
    (d / "notes.txt").write_text("not a trace file")
    return d


def test_weka_directory_with_every_field_of_the_format(tmp_path):
    d = _weka_dir(tmp_path)
    assert traces.detect(d) == "weka"
    one, two, three = traces.read_trace(d, "weka")
    assert (one.id, two.id, three.id) == ("sess-1", "sess-2", "sess-3")
    assert one.prefix_scope == "session" and two.prefix_scope == "global"
    r = {x.id: x for x in one.requests}
    assert sorted(r) == ["main.s0/0", "main.s0/1", "main.s2/0", "main/0", "main/1"]
    assert [r[k].t for k in ("main/0", "main.s0/0", "main.s0/1", "main/1", "main.s2/0")] == [0, 2.5, 4.0, 7.0, 10.5]
    assert r["main.s0/0"].depends_on == ["main/0"] and r["main.s0/0"].delay_s == 0.5
    # null think time: t minus the end (t + api_time) of what it waits for
    assert r["main.s0/1"].delay_s == pytest.approx(104.0 - (102.5 + 0.4))
    assert r["main.s0/1"].output_tokens == 1
    assert r["main/1"].depends_on == ["main/0", "main.s0/1"] and r["main/1"].delay_s == 0.5
    chains = {c.id: c for c in one.chains}
    assert chains["main.s0"].joined_by == "main/1" and chains["main.s2"].background and "main.s1" not in chains
    (_, late) = two.requests
    assert late.delay_s == 2.0  # null think time, no api_time recorded: counted as 0
    b = _builder()
    p0, p1 = b.build(one, 0, r["main/0"]), b.build(one, 0, r["main/1"])
    assert p1[:200] == p0 and len(p1) == 400  # the shared context is shared exactly


def test_weka_directory_rejects_a_duplicate_id_across_files(tmp_path):
    d = _weka_dir(tmp_path)
    _write(d / "d.jsonl", [{"id": "sess-2", "block_size": 64, "requests": [_req(0, 64, 4, [1])]}])
    with pytest.raises(InputFileError, match=r"d.jsonl: line 1: duplicate trace id 'sess-2' \(first at .*b.json"):
        weka.read(d)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputFileError, match="without .json or .jsonl"):
        weka.read(empty)


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"id": "x", "block_size": 64, "requests": [{"t": 0, "in": 4,', "line 2: malformed JSON (truncated line?)"),
        ({"id": "x", "block_size": 4, "requests": [_req(0, 4, 1, [0], think=-1.0)]}, "requests.0.request.think_time"),
        (
            {"id": "x", "block_size": 4, "requests": [{"t": 0, "in": 4, "hash_ids": [0]}]},
            "requests.0.request.out: Field required",
        ),
        (
            {
                "id": "x",
                "block_size": 4,
                "requests": [
                    _req(0, 4, 1, [0]),
                    {"type": "subagent", "requests": [{"t": 1, "in": 4, "out": 1, "hash_ids": "zero"}]},
                ],
            },
            "requests.1.subagent.requests.0.request.hash_ids",
        ),
        ({"id": "x", "block_size": 4, "requests": [_req(0, 4, 1, [0, 1, 2])]}, "3 hash ids for 4 input tokens"),
        ({"id": "x", "requests": [_req(0, 4, 1, [0])]}, "block_size: Field required"),
        ({"id": "x", "block_size": 4, "hash_id_scope": "galaxy", "requests": [_req(0, 4, 1, [0])]}, "hash_id_scope"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_weka_bad_input_names_file_line_and_field(tmp_path, line, needle):
    good = {"id": "ok", "block_size": 4, "requests": [_req(0, 4, 1, [0])]}
    path = _write(tmp_path / "bad.jsonl", [good, line])
    with pytest.raises(InputFileError) as err:
        weka.read(path)
    assert str(path) in str(err.value) and "line 2" in str(err.value) and needle in str(err.value)


def test_weka_broken_pretty_printed_file_names_its_line(tmp_path):
    text = json.dumps({"id": "x", "block_size": 4, "requests": [_req(0, 4, 1, [0])]}, indent=2)
    path = tmp_path / "x.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(InputFileError, match=r"x.json: line \d+: malformed JSON"):
        weka.read(path)


# --- Mooncake --------------------------------------------------------------------------------------


def test_mooncake_single_request_rows(tmp_path):
    path = _write(
        tmp_path / "m.jsonl",
        [
            {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [0, 1]},
            {"timestamp": 1500, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
        ],
    )
    assert traces.detect(path) == "mooncake"
    s = traces.read_trace(path, "mooncake")
    assert [len(x.requests) for x in s] == [1, 1] and s[0].prefix_scope == "global"
    b = _builder()
    p0, p1 = b.build(s[0], 0, s[0].requests[0]), b.build(s[1], 0, s[1].requests[0])
    assert p0[1:512] == p1[1:512] and len(p1) == 1100  # global hash ids: shared across lines


def test_mooncake_multi_turn_sessions_grow_their_context(tmp_path):
    rows = [
        {
            "session_id": "s1",
            "input_length": 1000,
            "output_length": 50,
            "hash_ids": [0, 1],
            "timestamp": 0.0,
            "group_id": 3,
        },
        {"session_id": "s2", "input_length": 600, "output_length": 20, "hash_ids": [0, 7], "timestamp": 900.0},
        {"session_id": "s1", "input_length": 300, "output_length": 40, "hash_ids": [8], "delay": 2500.0},
        {"session_id": "s1", "input_length": 700, "output_length": 10, "hash_ids": [9, 10], "delay": 0},
        {"timestamp": 4000, "input_length": 100, "output_length": 3},  # no session id: one request
    ]
    (s1, s2, single) = mooncake.read(_write(tmp_path / "mt.jsonl", rows), block_size=512)
    assert (s1.id, s2.id, single.id) == ("s1", "s2", "mt:5")
    lengths = [r.input_tokens for r in s1.requests]
    assert lengths == [1000, 1000 + 50 + 300, 1350 + 40 + 700]
    assert [r.delay_s for r in s1.requests] == [0.0, 2.5, 0.0] and [r.t for r in s1.requests] == [0, 2.5, 2.5]
    assert [r.depends_on for r in s1.requests] == [[], ["main/0"], ["main/1"]]
    ids = [r.hash_ids for r in s1.requests]
    assert ids[0] == [0, 1] and ids[1][:2] == [0, 1] and ids[2][:3] == ids[1] and len(ids[2]) == 5
    assert min(ids[1][2:] + ids[2][3:]) > 10  # new blocks never reuse a named block
    b = _builder()
    p = [b.build(s1, 0, r) for r in s1.requests]
    assert p[1][:1000] == p[0] and p[2][:1350] == p[1]  # each turn starts with the previous prompt exactly
    assert b.build(s2, 1, s2.requests[0])[1:512] == p[0][1:512]  # turn 0's global blocks are shared


@pytest.mark.parametrize(
    "row, needle",
    [
        ('{"session_id": "a", "input_length": 10, "output_len', "line 2: malformed JSON (truncated line?)"),
        (
            {"session_id": "a", "input_length": 10, "output_length": 5, "delay": -20},
            "line 2: delay: Input should be greater than or equal to 0",
        ),
        ({"session_id": "a", "input_length": 10, "hash_ids": [1]}, "line 2: output_length: Field required"),
        (
            {"session_id": "a", "text_input": "hello", "output_length": 5},
            "line 2: input_length: required; a row given as text_input",
        ),
        ({"session_id": "a", "input_length": 10, "output_length": 5, "timestamp": "noon"}, "line 2: timestamp"),
    ],
)
def test_mooncake_bad_rows_name_file_line_and_field(tmp_path, row, needle):
    good = {"session_id": "a", "input_length": 10, "output_length": 5, "timestamp": 0}
    path = _write(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(InputFileError) as err:
        mooncake.read(path)
    assert str(path) in str(err.value) and needle in str(err.value)


def test_mooncake_first_turn_names_more_blocks_than_its_prompt(tmp_path):
    path = _write(tmp_path / "m.jsonl", [{"input_length": 10, "output_length": 5, "hash_ids": [1, 2, 3]}])
    with pytest.raises(InputFileError, match="line 1: hash_ids: 3 blocks for input_length 10"):
        mooncake.read(path, block_size=8)


# --- the AgentX harness's generator ------------------------------------------------------------------


def _uv(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "uv", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def aiperf(tmp_path_factory):
    """``aiperf`` of PyPI's agentx-harness, in a venv of its own made by uv (its cache keeps a rerun to
    seconds); ``INFBENCH_AGENTX_VENV`` names a venv to create once and reuse across test runs."""
    venv = Path(os.environ.get("INFBENCH_AGENTX_VENV") or tmp_path_factory.mktemp("agentx") / "venv")
    exe = venv / "bin" / "aiperf"
    if not exe.exists():
        made = _uv("venv", "--quiet", "--python", sys.executable, str(venv))
        assert made.returncode == 0, made.stderr
        python = str(venv / "bin" / "python")
        install = _uv("pip", "install", "--quiet", "--python", python, AGENTX_HARNESS, timeout=1200)
        if install.returncode != 0:
            probe = _uv("pip", "install", "--dry-run", "--no-deps", "--python", python, AGENTX_HARNESS)
            if probe.returncode != 0:
                pytest.skip(f"PyPI unreachable: cannot install {AGENTX_HARNESS} ({probe.stderr.strip()[-300:]})")
            raise AssertionError(f"uv pip install {AGENTX_HARNESS} failed:\n{install.stderr[-4000:]}")
    return exe


def test_generator_traces_read_as_its_own_statistics(aiperf, tmp_path):
    """Sessions, turns, prompt and output tokens and delays read from ``aiperf synthesize agentic-code``
    output equal the generator's manifest and quality report (means are reported to 2 decimals)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run(
        [str(aiperf), "synthesize", "agentic-code", "--num-sessions", "40", "--seed", "42", "--output", str(tmp_path)],
        check=True,
        capture_output=True,
        env=env,
        timeout=600,
    )
    (dataset,) = tmp_path.glob("*/dataset.jsonl")
    manifest = json.loads((dataset.parent / "manifest.json").read_text())
    quality = json.loads((dataset.parent / "quality.json").read_text())
    observed = {k: v["observed"] for k, v in quality["observed_vs_target"].items()}
    block_size = manifest["generation_params"]["block_size"]

    assert traces.detect(dataset) == "mooncake"
    sessions = traces.read_trace(dataset, "mooncake", block_size=block_size)
    turns = [r for s in sessions for r in s.requests]
    later = [(prev, r) for s in sessions for prev, r in zip(s.requests, s.requests[1:])]
    new_tokens = [r.input_tokens - prev.input_tokens - prev.output_tokens for prev, r in later]

    def mean(values):
        return sum(values) / len(values)

    assert len(sessions) == manifest["num_sessions"] == quality["session_stats"]["count"] == 40
    assert mean([len(s.requests) for s in sessions]) == pytest.approx(quality["session_stats"]["mean"], abs=0.005)
    assert len(turns) == observed["generation_length"]["count"]
    assert mean([r.output_tokens for r in turns]) == pytest.approx(observed["generation_length"]["mean"], abs=0.005)
    assert mean([s.requests[0].input_tokens for s in sessions]) == pytest.approx(
        observed["initial_context"]["mean"], abs=0.005
    )
    assert len(new_tokens) == observed["new_tokens_per_turn"]["count"]
    assert mean(new_tokens) == pytest.approx(observed["new_tokens_per_turn"]["mean"], abs=0.005)
    assert mean([r.delay_s * 1000 for _, r in later]) == pytest.approx(
        observed["inter_turn_delay_ms"]["mean"], abs=0.005
    )
    # the whole prompt of every turn, in blocks, as the generator's cache model has it
    cache = json.loads((dataset.parent / "cache_structure.json").read_text())
    blocks = {c["session_id"]: [t["num_blocks"] for t in c["turns"]] for c in cache["sessions"]}
    assert {s.id: [len(r.hash_ids) for r in s.requests] for s in sessions} == blocks
    assert max(r.input_tokens for r in turns) <= manifest["generation_params"]["max_prompt_tokens"]
    for s in sessions:  # every turn's blocks start with the previous turn's
        for prev, r in zip(s.requests, s.requests[1:]):
            assert r.hash_ids[: len(prev.hash_ids)] == prev.hash_ids


def test_workload_prepares_a_weka_directory(tmp_path):
    d = _weka_dir(tmp_path)
    summary = workload.prepare(
        str(d),
        "weka",
        length_scale=1.0,
        context_limit=10_000,
        block_size=512,
        out_sessions=str(tmp_path / "w.jsonl"),
        out_summary=str(tmp_path / "w.json"),
    )
    assert summary.sessions_read == 3 and len(workload.load(tmp_path / "w.jsonl")) == 3
    inputs = json.loads((tmp_path / "w.json").read_text())["provenance"]["inputs"]
    assert {Path(p).name for p in inputs} == {"a.json", "b.json", "c.jsonl", "notes.txt"}  # the directory's files
