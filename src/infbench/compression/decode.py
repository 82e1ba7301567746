"""Decode speed (PROTOCOL A5.4): batch 1, a fixed prompt, greedy, after warmup.

``L`` is the median over rounds of the mean first-to-last-token interval of the
requests in a round; ``TPS = (n_out - 1) / L`` (the paper's ``127 / L`` for 128
output tokens). Prefill and TTFT are excluded. Reported, never scored.
"""

from __future__ import annotations

import statistics

import numpy as np
from pydantic import BaseModel


class DecodeTiming(BaseModel):
    prompt_tokens: int
    output_tokens: int
    rounds: int
    requests_per_round: int
    round_means_s: list[float]
    latency_s: float
    tps: float


def measure(
    generate,
    *,
    vocab_size: int,
    prompt_tokens: int,
    output_tokens: int,
    rounds: int,
    requests_per_round: int,
    warmup: int,
    seed: int,
) -> DecodeTiming:
    """``generate(ids, n) -> (tokens, per-token times)`` of the submission process."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, vocab_size, size=prompt_tokens).tolist()
    for _ in range(warmup):
        generate(prompt, output_tokens)
    means = []
    for _ in range(rounds):
        spans = []
        for _ in range(requests_per_round):
            tokens, times = generate(prompt, output_tokens)
            if len(tokens) != output_tokens:
                raise ValueError(f"generate returned {len(tokens)} tokens, asked for {output_tokens}")
            spans.append(times[-1] - times[0])
        means.append(statistics.fmean(spans))
    latency = statistics.median(means)
    return DecodeTiming(
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        rounds=rounds,
        requests_per_round=requests_per_round,
        round_means_s=means,
        latency_s=latency,
        tps=(output_tokens - 1) / latency if latency > 0 else float("inf"),
    )
