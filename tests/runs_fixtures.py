"""Small run directories in the documented formats (docs/runs.md): run.yaml, reward and replay
logs written like ``infbench reward`` writes them, versions, events, and Claude Code / Codex
session transcripts in their public JSONL formats."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
TASK = "smollm2-135m-0.1gib"


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def package(path: Path, payload: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.yaml").write_text(
        yaml.safe_dump(
            {
                "name": path.name,
                "source": "smollm2-135m",
                "runtime": "llama.cpp",
                "weights": "model.gguf",
                "tokenizer": "tokenizer",
            }
        )
    )
    (path / "model.gguf").write_text(payload)
    return path


def reward_line(
    minutes: float,
    submission: str,
    content_hash: str,
    reward: float,
    ppl: float,
    s_pkg_bytes: int = 95_000_000,
    ref_ppl: float = 27.0,
) -> dict:
    return {
        "kind": "reward",
        "submission": submission,
        "task": TASK,
        "source": "smollm2-135m",
        "limit_gib": 0.1,
        "content_hash": content_hash,
        "runtime": "llama.cpp",
        "s_pkg_bytes": s_pkg_bytes,
        "s_res_bytes": s_pkg_bytes - 1000,
        "ppl": ppl,
        "ref_ppl": ref_ppl,
        "f": reward / 10,
        "reward": reward,
        "failed_check": None if reward > 0 else "storage_package",
        "wall_s": 42.0,
        "finished_at": at(minutes),
    }


def claude_code_lines() -> list[dict]:
    """Two API messages; the first is split over two lines (same message.id, as Claude Code writes it)."""

    def assistant(minutes, msg_id, content, usage):
        return {
            "parentUuid": None,
            "isSidechain": False,
            "userType": "external",
            "cwd": "/work",
            "sessionId": "s1",
            "version": "2.0.0",
            "type": "assistant",
            "uuid": f"u{minutes}",
            "timestamp": at(minutes).replace("+00:00", "Z"),
            "requestId": f"req_{msg_id}",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": content,
                "stop_reason": None,
                "usage": usage,
            },
        }

    usage1 = {
        "input_tokens": 10,
        "cache_creation_input_tokens": 2000,
        "cache_read_input_tokens": 0,
        "output_tokens": 50,
        "service_tier": "standard",
    }
    usage2 = {
        "input_tokens": 4,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 2000,
        "output_tokens": 300,
    }
    error = assistant(
        31,
        "msg_3",
        [{"type": "text", "text": "API Error"}],
        {"input_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 0},
    )
    error["message"]["model"] = "<synthetic>"  # Claude Code's own messages carry no tokens
    return [
        {"type": "summary", "summary": "compress the model", "leafUuid": "x"},
        {"type": "user", "timestamp": at(1).replace("+00:00", "Z"), "message": {"role": "user", "content": "go"}},
        assistant(2, "msg_1", [{"type": "text", "text": "Let me quantize."}], usage1),
        assistant(
            2.1,
            "msg_1",
            [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "Bash",
                    "input": {"command": "infbench reward v1 --task x"},
                }
            ],
            usage1,
        ),
        assistant(30, "msg_2", [{"type": "tool_use", "id": "toolu_2", "name": "Edit", "input": {}}], usage2),
        {**error, "isApiErrorMessage": True},
    ]


def codex_lines() -> list[dict]:
    return [
        {
            "timestamp": at(0.5),
            "type": "session_meta",
            "payload": {"id": "019a", "cwd": "/work", "originator": "codex_cli_rs", "cli_version": "0.58.0"},
        },
        {
            "timestamp": at(1),
            "type": "turn_context",
            "payload": {"cwd": "/work", "model": "gpt-5-codex", "effort": "high"},
        },
        {"timestamp": at(2), "type": "event_msg", "payload": {"type": "token_count", "info": None}},
        {
            "timestamp": at(3),
            "type": "response_item",
            "payload": {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c1"},
        },
        {
            "timestamp": at(4),
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {
                    "total_token_usage": {
                        "input_tokens": 1000,
                        "cached_input_tokens": 200,
                        "output_tokens": 80,
                        "reasoning_output_tokens": 40,
                        "total_tokens": 1080,
                    },
                    "last_token_usage": {
                        "input_tokens": 1000,
                        "cached_input_tokens": 200,
                        "output_tokens": 80,
                        "reasoning_output_tokens": 40,
                        "total_tokens": 1080,
                    },
                    "model_context_window": 272000,
                },
            },
        },
        {
            "timestamp": at(9),
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {
                    "total_token_usage": {
                        "input_tokens": 3000,
                        "cached_input_tokens": 1200,
                        "output_tokens": 100,
                        "reasoning_output_tokens": 40,
                        "total_tokens": 3100,
                    }
                },
            },
        },
        {
            "timestamp": at(9.5),
            "type": "event_msg",
            "payload": {
                "type": "token_count",
                "info": {
                    "total_token_usage": {
                        "input_tokens": 3000,
                        "cached_input_tokens": 1200,
                        "output_tokens": 100,
                        "reasoning_output_tokens": 40,
                        "total_tokens": 3100,
                    }
                },
                "rate_limits": {"primary": {"used_percent": 7.0}},
            },
        },
    ]


def run_yaml(
    run: Path,
    *,
    track: str = "compression",
    model: str = "claude-sonnet-4-5-20250929",
    final: str = "final",
    minutes: float = 120,
    task: str = TASK,
) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "run.yaml").write_text(
        yaml.safe_dump(
            {
                "agent": {"model": model, "scaffold": "claude-code", "effort": "high"},
                "track": track,
                "task": task,
                "budget_hours": 2,
                "start": at(0),
                "end": at(minutes),
                "final_submission": final,
            }
        )
    )


def compression_run(run: Path) -> Path:
    """Three versions (v2 reversed by feedback against its local metric, v3 confirmed), four reward
    calls, a completion declaration before the last weight change, transcripts of both formats."""
    from infbench.package_files import content_hash

    run_yaml(run)
    hashes = {}
    for i, (minutes, mse) in enumerate([(5, 0.006), (20, 0.004), (60, 0.003)], start=1):
        pkg = package(run / "versions" / f"v{i}", f"weights {i}")
        hashes[f"v{i}"] = content_hash(pkg)
        (run / "versions" / f"v{i}.json").write_text(
            json.dumps({"published_at": at(minutes), "local_metrics": {"weight_rel_mse": mse}})
        )
    package(run / "final", "weights 3")
    write_jsonl(
        run / "reward_log.jsonl",
        [
            reward_line(10, "v1", hashes["v1"], 7.0, 38.0),
            reward_line(25, "v2", hashes["v2"], 6.0, 45.0),
            reward_line(40, "v1", hashes["v1"], 7.001, 38.0),
            reward_line(70, "v3", hashes["v3"], 7.5, 35.0, s_pkg_bytes=110_000_000),
        ],
    )
    write_jsonl(
        run / "events.jsonl",
        [
            {"type": "completion", "time": at(50), "note": "done"},
            {"type": "tool_call", "time": at(55), "name": "quantize"},
            {"type": "completion", "time": at(100)},
        ],
    )
    write_jsonl(run / "transcripts/claude-code/session.jsonl", claude_code_lines())
    write_jsonl(run / "transcripts/codex/rollout-2026-01-05.jsonl", codex_lines())
    return run


def serving_run(run: Path, concurrencies=(1, 4, 8)) -> Path:
    """Load changes up, replays of two server versions on a shared seed."""
    run_yaml(run, track="serving", final="server", task="smollm2-135m-cpu")
    (run / "server").mkdir()
    (run / "server" / "launch.sh").write_text("#!/bin/sh\n")
    write_jsonl(
        run / "events.jsonl",
        [{"type": "load", "time": at(10 + 10 * i), "concurrency": c} for i, c in enumerate(concurrencies)],
    )
    write_jsonl(
        run / "replay_log.jsonl",
        [
            {
                "time": at(15),
                "content_hash": "a" * 64,
                "seed": 0,
                "concurrency": 1,
                "D": 0.0,
                "G": 0.06,
                "f": 0.0,
                "completed": 3,
                "wall_s": 50,
            },
            {
                "time": at(45),
                "content_hash": "a" * 64,
                "seed": 0,
                "concurrency": 8,
                "D": 2.0,
                "G": 1.0,
                "f": 0.5,
                "completed": 12,
                "wall_s": 50,
            },
            {
                "time": at(90),
                "content_hash": "b" * 64,
                "seed": 0,
                "concurrency": 8,
                "D": 3.0,
                "G": 2.0,
                "f": 0.6,
                "completed": 20,
                "wall_s": 50,
            },
        ],
    )
    return run
