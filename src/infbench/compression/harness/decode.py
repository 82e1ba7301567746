"""Decode speed (PROTOCOL A5.4): batch 1, a fixed prompt, greedy, after warmup, timed by the pipeline.

Each request is a prefill of the prompt and ``n_out - 1`` steps, every token the argmax of the package's
logits (:mod:`.greedy`); a token's time is when the logits it comes from arrived at the pipeline. ``L`` is the
median over rounds of the mean first-to-last-token interval of the requests in a round; ``TPS = (n_out - 1) /
L`` (the paper's ``127 / L`` for 128 output tokens). Prefill and TTFT are excluded. Reported, never scored.
"""

from __future__ import annotations

import statistics

import numpy as np

from infbench.compression.harness.greedy import greedy
from infbench.compression.records import DecodeTiming


def measure(
    model,
    *,
    vocab_size: int,
    prompt_tokens: int,
    output_tokens: int,
    rounds: int,
    requests_per_round: int,
    warmup: int,
    seed: int,
) -> DecodeTiming:
    """Time ``model``'s greedy decoding of a random prompt (drawn by ``seed``)."""
    prompt = np.random.default_rng(seed).integers(0, vocab_size, size=prompt_tokens).tolist()
    for _ in range(warmup):
        greedy(model, [prompt], output_tokens)
    means = []
    for _ in range(rounds):
        spans = []
        for _ in range(requests_per_round):
            (g,) = greedy(model, [prompt], output_tokens)
            spans.append(g.times[-1] - g.times[0])
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
