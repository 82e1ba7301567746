"""Integrity checks of a submission's forward pass (PROTOCOL A5.3, issues 3 and 17).

Each check returns a named pass/fail with its evidence:

- ``causality``, ``batch_invariance``, ``determinism``: probes hidden among the
  scoring requests, and ``statefulness``: rows asked again of a second, fresh
  process (:mod:`infbench.compression.probes`);
- ``greedy_matches_argmax``: greedy generation equals the argmax of the scored
  logits on the same sequence (near-ties within ``tie_margin`` excepted);
- ``batch_invariance``: a sequence's log-probs alone and inside a batch agree;
- ``determinism``: the same call twice gives the same log-probs;
- ``likelihood_above_source``: no causal model is likely to beat, on the source's own samples, the
  distribution they were drawn from by a large likelihood ratio (Markov's inequality on that ratio, whose
  expectation is at most 1), so a candidate whose ratio exceeds ``1 / alpha`` is not scoring with a causal
  forward pass; an honest package fails with probability at most ``alpha``.

What the package can read, write or reach is not checked here but made impossible by the sandbox
(:mod:`infbench.sandbox`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from infbench.checks import Check
from infbench.compression.scoring import ppl_ratio


def _log_probs(logits: np.ndarray) -> np.ndarray:
    return torch.log_softmax(torch.from_numpy(logits).double(), -1).numpy()


def greedy_matches_argmax(
    logits: Callable, generate: Callable, prompt: list[int], n_new: int, tie_margin: float, vocab: int
) -> Check:
    tokens, _ = generate(prompt, n_new)
    outside = [t for t in tokens if not isinstance(t, int) or not 0 <= t < vocab]
    if outside:
        return Check(
            name="greedy_matches_argmax",
            passed=False,
            evidence={"generated": len(tokens), "token_ids_outside_vocabulary": outside[:5], "vocab": vocab},
        )
    mismatches = []
    if tokens:
        seq = np.asarray([prompt + tokens], dtype=np.int64)
        lp = _log_probs(logits(seq[:, :-1], len(tokens)))[0]
        for j, tok in enumerate(tokens):
            best = int(np.argmax(lp[j]))
            if best != tok and lp[j, best] - lp[j, tok] > tie_margin:
                mismatches.append(
                    {"position": j, "generated": tok, "argmax": best, "gap": float(lp[j, best] - lp[j, tok])}
                )
    return Check(
        name="greedy_matches_argmax",
        passed=not mismatches and len(tokens) == n_new,
        evidence={"generated": len(tokens), "mismatches": mismatches[:5], "tie_margin": tie_margin},
    )


def likelihood_above_source(
    sampler_logprobs: np.ndarray, logprobs: np.ndarray, *, temperature: float, alpha: float
) -> Check:
    """Fails when the candidate's likelihood ratio against the sampling distribution, on its samples, exceeds
    ``1 / alpha``.

    Token ``y_i`` was drawn from the source's ``p(. | h_i)``; ``sampler_logprobs`` holds ``log p(y_i | h_i)``.
    A causal candidate's ``q(. | h_i)`` is a distribution fixed before ``y_i`` is seen, so
    ``E[q(y_i | h_i) / p(y_i | h_i) | h_i] = sum over y with p(y) > 0 of q(y | h_i) <= 1``, and by the tower
    property the product of these ratios over every token of every row, ``exp(sum(log q - log p))``, has
    expectation at most 1: it exceeds ``1 / alpha`` with probability at most ``alpha`` (Markov), however
    close to or far from the source the candidate is and whatever the floating-point noise of its forward
    pass. With ``N`` tokens the limit is a PPL ratio against the sampler of ``alpha ** (-1 / N)``. A package
    that looks at the token it is asked to predict is not causal and lands above it once its gain exceeds
    ``log(1 / alpha)`` nats in all.

    The bound holds for samples drawn at temperature 1 (the protocol's): at another temperature the stored
    log-probs are not those of the sampling distribution, and the check passes, saying it does not apply.
    """
    tokens = int(np.size(logprobs))
    log_ratio = float(np.sum(logprobs, dtype=np.float64) - np.sum(sampler_logprobs, dtype=np.float64))
    limit = float(np.log(1.0 / alpha))
    evidence = {
        "log_likelihood_ratio": log_ratio,
        "limit": limit,
        "alpha": alpha,
        "tokens": tokens,
        "f_vs_source_samples": ppl_ratio(sampler_logprobs, logprobs),
        "f_limit": float(np.exp(limit / tokens)),
        "temperature": temperature,
    }
    if temperature != 1.0:
        return Check(
            name="likelihood_above_source",
            passed=True,
            evidence={
                **evidence,
                "applies": False,
                "why": "samples drawn at a temperature other than 1: the bound does not apply",
            },
        )
    return Check(name="likelihood_above_source", passed=log_ratio <= limit, evidence={**evidence, "applies": True})
