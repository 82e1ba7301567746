"""Shared helpers of the serving tests: a real local server process, replay settings, a streamed completion
and the transformers greedy decoding it is compared with."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx

from infbench.serving import servers
from infbench.serving.replay_settings import ReplaySettings


@contextlib.contextmanager
def instant_server(log: Path, *args: str, startup_timeout_s: float = 60):
    spec = servers.ServerSpec(
        command=["{python}", "-m", "infbench.serving.instant", "--port", "{port}", *args],
        startup_timeout_s=startup_timeout_s,
    )
    with servers.launched("instant", spec, servers.LaunchVars(), log) as base:
        yield base


def settings(base: str, **kw) -> ReplaySettings:
    values = dict(
        base_url=base,
        model="model",
        concurrency=1,
        seed=0,
        warmup_s=0.0,
        window_s=5.0,
        request_timeout_s=5.0,
        idle_cap_s=10.0,
        token_low=1000,
        token_high=30000,
        marker_tokens=2,
        temperature=0.0,
        start_ratio=(0.0, 0.0),
    )
    values.update(kw)
    return ReplaySettings(**values)


def stream_completion(base: str, body: dict, timeout: float) -> list[dict]:
    """The JSON chunks of a streamed ``/v1/completions`` request (the server must answer 200)."""
    chunks = []
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def transformers_greedy(checkpoint: Path, prompt: list[int], n: int) -> list[int]:
    """``n`` tokens of plain greedy decoding by transformers in float32, EOS not special."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt) :]
