"""``infbench replay``: a trace file or directory replayed from the command line against a real server
on loopback (the instant server, the llama.cpp reference engine), Ctrl-C, and the idle cap off."""

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pandas as pd
import pytest
from conftest import EMBEDDED_ORIGIN, REPO
from serving_helpers import instant_server, settings

from infbench import sources
from infbench.serving import replay, servers
from infbench.serving.traces import weka

CLI = [sys.executable, "-m", "infbench.cli", "replay"]


def _env():
    return {**os.environ, "PYTHONPATH": str(REPO / "src")}


def _mooncake(path, sessions=3, turns=3):
    rows = []
    for s in range(sessions):
        for k in range(turns):
            row = {
                "session_id": f"s{s}",
                "input_length": 40 if k == 0 else 12,
                "output_length": 4,
                "hash_ids": [0, 100 + s] if k == 0 else [900 + 10 * s + k],
            }
            rows.append(row | ({"timestamp": 1000.0 * s, "group_id": 1} if k == 0 else {"delay": 100.0}))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _replay(*args, timeout=120):
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=_env(), timeout=timeout)


def test_replay_a_multi_turn_trace_once_in_trace_order(tmp_path):
    trace = _mooncake(tmp_path / "mt.jsonl")
    with instant_server(tmp_path / "server.log") as base:
        proc = _replay(
            "--trace",
            str(trace),
            "--url",
            base,
            "--out",
            str(tmp_path / "out"),
            "--order",
            "trace",
            "--concurrency",
            "2",
            "--warmup",
            "0",
            "--window",
            "60",
            "--start-ratio",
            "0",
            "0",
            "--block-size",
            "16",
            "--tau-first",
            "1",
            "--tau-token",
            "0.1",
            "--no-progress",
        )
        received = httpx.get(base + "/debug/requests").json()
    assert proc.returncode == 0, proc.stderr
    assert "3 sessions of" in proc.stdout and "(mooncake, trace order)" in proc.stdout and "ended: trace" in proc.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    frame = pd.read_parquet(tmp_path / "out" / "records.parquet")
    assert summary["ended"] == "trace" and summary["settings"]["model"] == "instant"  # from GET /v1/models
    assert len(frame) == 9 and frame["ok"].all() and summary["score"]["completed"] == 9
    assert summary["measured_window_s"] < 60 and summary["score"]["window_s"] == summary["measured_window_s"]
    assert summary["score"]["D"] == pytest.approx(summary["score"]["G"])  # the instant server meets any target
    by_session = frame.sort_values("send_time").groupby("session_id")["input_tokens"].apply(list).to_dict()
    assert by_session == {f"s{s}": [40, 56, 72] for s in range(3)}  # 40, 40 + 4 + 12, 56 + 4 + 12
    for short, long in ((40, 56), (56, 72)):  # every turn starts with its session's previous prompt exactly
        previous = {tuple(r["prompt"]) for r in received if len(r["prompt"]) == short}
        assert all(tuple(r["prompt"][:short]) in previous for r in received if len(r["prompt"]) == long)


def test_replay_a_weka_directory_with_chat_completions(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(2000)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    d = tmp_path / "weka"
    d.mkdir()
    for i in range(2):
        (d / f"{i}.json").write_text(
            json.dumps(
                {
                    "id": f"w{i}",
                    "block_size": 8,
                    "models": ["m"],
                    "hash_id_scope": "local",
                    "requests": [
                        {"t": 0, "type": "n", "in": 24, "out": 3, "hash_ids": [1, 2, 3], "think_time": None},
                        {
                            "t": 1,
                            "type": "subagent",
                            "agent_id": "a",
                            "requests": [
                                {"t": 1.0, "type": "s", "in": 16, "out": 2, "hash_ids": [1, 9], "think_time": 0.0}
                            ],
                        },
                        {"t": 2, "type": "s", "in": 40, "out": 5, "hash_ids": [1, 2, 3, 4, 5], "think_time": 0.1},
                    ],
                },
                indent=1,
            )
        )
    with instant_server(tmp_path / "server.log") as base:
        proc = _replay(
            "--trace",
            str(d),
            "--url",
            base,
            "--model",
            "m",
            "--api",
            "chat",
            "--tokenizer",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--order",
            "trace",
            "--concurrency",
            "2",
            "--warmup",
            "0",
            "--window",
            "30",
            "--start-ratio",
            "0",
            "0",
            "--token-range",
            "10",
            "2000",
            "--no-progress",
        )
        received = httpx.get(base + "/debug/requests").json()
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_parquet(tmp_path / "out" / "records.parquet")
    assert len(frame) == 6 and frame["ok"].all(), frame["error"].tolist()
    assert sorted(len(r["prompt"]) for r in received) == [16, 16, 24, 24, 40, 40]  # words of the text sent
    assert (frame["usage_prompt_tokens"] == frame["input_tokens"]).all()  # this tokenizer: 1 word, 1 id
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["trace_format"] == "weka"


def test_ctrl_c_stops_cleanly_and_keeps_what_was_measured(tmp_path):
    trace = _mooncake(tmp_path / "mt.jsonl", sessions=4, turns=50)
    with instant_server(tmp_path / "server.log", "--seconds-per-token", "0.05") as base:
        proc = subprocess.Popen(
            [
                *CLI,
                "--trace",
                str(trace),
                "--url",
                base,
                "--model",
                "m",
                "--out",
                str(tmp_path / "out"),
                "--concurrency",
                "2",
                "--warmup",
                "0",
                "--window",
                "120",
                "--block-size",
                "16",
                "--no-progress",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(httpx.get(base + "/debug/requests").json()) < 4:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopping: no new requests" in err and "ended: interrupted" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    frame = pd.read_parquet(tmp_path / "out" / "records.parquet")
    assert summary["ended"] == "interrupted" and 0 < summary["measured_window_s"] < 60
    assert len(frame) >= 4 and frame["ok"].all()  # what was in flight finished and counts
    assert summary["score"]["completed"] == int(frame["in_window"].sum())


def test_bad_trace_and_settings_are_errors_naming_what_to_fix(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"session_id": "a", "input_length": 10, "output_length": 5}\n'
        '{"session_id": "a", "input_length": 10, "output_length": 5, "delay": -3}\n'
    )
    proc = _replay("--trace", str(bad), "--url", "http://127.0.0.1:9", "--model", "m", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and f"{bad}: line 2: delay" in proc.stderr
    proc = _replay(
        "--trace",
        str(_mooncake(tmp_path / "ok.jsonl")),
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--out",
        str(tmp_path / "o"),
        "--concurrency",
        "0",
    )
    assert proc.returncode == 2 and "config key 'concurrency'" in proc.stderr
    proc = _replay(
        "--trace", str(_mooncake(tmp_path / "ok.jsonl")), "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "o")
    )
    assert proc.returncode == 2 and "'--model': not given" in proc.stderr


def test_idle_cap_off_keeps_the_recorded_delay(tmp_path):
    """A 2 s recorded delay with nothing in flight: capped at 0.2 s it is waited 0.2 s; with the cap off
    (None) it is waited in full."""
    session = weka.session(
        {
            "id": "gap",
            "block_size": 4,
            "requests": [
                {"t": 0, "in": 8, "out": 1, "hash_ids": [0, 1], "think_time": 0.0},
                {"t": 2, "in": 12, "out": 1, "hash_ids": [0, 1, 2], "think_time": 2.0},
            ],
        }
    )
    gaps = {}
    with instant_server(tmp_path / "server.log") as base:
        for cap in (0.2, None):
            recs = replay.run(iter([session]), settings(base, window_s=10.0, idle_cap_s=cap))
            first, second = sorted(recs, key=lambda r: r.send_time)
            gaps[cap] = second.send_time - first.end_time
    assert 0.15 < gaps[0.2] < 1.0 and 1.95 < gaps[None] < 2.6


@pytest.mark.slow
def test_replay_against_the_llamacpp_server_on_loopback(tmp_path):
    gguf = sources.resolve_gguf("smollm2-135m", sources.SourceOrigin(**EMBEDDED_ORIGIN))
    spec = servers.ServerSpec(
        command=[
            "{python}",
            "-m",
            "infbench.serving.llamacpp_server",
            "--model",
            "{gguf}",
            "--port",
            "{port}",
            "--threads",
            "1",
            "--n-ctx",
            "512",
            "--served-model-name",
            "{model_name}",
        ],
        startup_timeout_s=300,
    )
    trace = _mooncake(tmp_path / "mt.jsonl", sessions=2, turns=2)
    with servers.launched(
        "llamacpp", spec, servers.LaunchVars(gguf=str(gguf), model_name="smollm2"), tmp_path / "server.log"
    ) as base:
        proc = _replay(
            "--trace",
            str(trace),
            "--url",
            base,
            "--model",
            "smollm2",
            "--out",
            str(tmp_path / "out"),
            "--order",
            "trace",
            "--warmup",
            "0",
            "--window",
            "120",
            "--start-ratio",
            "0",
            "0",
            "--block-size",
            "16",
            "--request-timeout",
            "60",
            "--accelerator",
            "cpu",
            "--devices",
            "1",
            "--no-progress",
            timeout=300,
        )
    assert proc.returncode == 0, proc.stderr
    frame = pd.read_parquet(tmp_path / "out" / "records.parquet")
    assert len(frame) == 4 and frame["ok"].all(), frame["error"].tolist()
    assert (frame["output_tokens"] == 4).all() and (frame["usage_prompt_tokens"] == frame["input_tokens"]).all()
    assert "ended: trace" in proc.stdout and "G (gross $ per GPU $)" in proc.stdout


def test_pipeline_takes_a_weka_directory_and_no_idle_cap(tmp_path):
    from conftest import planned_jobs, run_snakemake
    from test_serving_pipeline import SERVING_TARGETS, _config

    d = tmp_path / "traces"
    d.mkdir()
    (d / "a.json").write_text(
        json.dumps(
            {
                "id": "a",
                "block_size": 4,
                "requests": [{"t": 0, "type": "n", "in": 8, "out": 2, "hash_ids": [0, 1], "think_time": None}],
            },
            indent=2,
        )
    )
    good = _config(
        tmp_path, **{"serving.workload.trace": {"format": "weka", "path": str(d)}, "serving.replay.idle_cap_s": None}
    )
    proc = run_snakemake(tmp_path, "-n", *SERVING_TARGETS, "--configfile", str(good))
    assert planned_jobs(proc)["serving_workload"] == 1 and "serving_synthetic" not in planned_jobs(proc)
    bad = _config(tmp_path, **{"serving.replay.idle_cap_s": 0})
    proc = run_snakemake(tmp_path, "-n", *SERVING_TARGETS, "--configfile", str(bad), check=False)
    assert proc.returncode != 0 and "idle_cap_s" in proc.stdout + proc.stderr
