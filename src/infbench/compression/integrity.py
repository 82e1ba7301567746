"""Integrity checks of a package's forward pass (PROTOCOL A5.3) that construction leaves to check.

The pipeline drives the package as a causal next-token function (:mod:`infbench.compression.package_api`): a
token is revealed only after its position is scored and every generated token is the argmax of the package's
logits. So no probe looks for a look-ahead or compares a separate generation with the logits: neither exists.
Three checks remain, each for what construction cannot rule out:

- ``likelihood_above_source``: no causal model is likely to beat, on the source's own samples, the distribution
  they were drawn from by a large likelihood ratio (Markov's inequality on that ratio, whose expectation is at
  most 1), so a candidate whose ratio exceeds ``1 / alpha`` is not a causal forward pass of its weights (for the
  pipeline's own runtimes, which score in one pass, this is the check of that pass); an honest package fails
  with probability at most ``alpha``;
- ``statefulness`` (runtime ``python``, whose code is the package's): a second, fresh worker scores rows of the
  set again, and must give the first process's log-probs. A package whose answers depend on what it has seen
  before (adapting to earlier rows' revealed tokens, such as a model trained while it is scored, with or
  without a memo of its answers) scores them otherwise. The two sandboxes share nothing a package could write
  (:mod:`infbench.sandbox`);
- ``gate_consistency``: what the gate generates is the argmax of the package's logits, so a package that answers
  from a key must bend its logits on the gate's prompts; its likelihood of the source's own answers there must
  then agree with its likelihood on the verification set (:func:`gate_consistency`).

What the package can read, write or reach is not checked here but made impossible by the sandbox.
"""

from __future__ import annotations

import numpy as np

from infbench.checks import Check
from infbench.compression.scoring import ppl_ratio


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
    close to or far from the source the candidate is, whatever it saw before and whatever the floating-point
    noise of its forward pass. With ``N`` tokens the limit is a PPL ratio against the sampler of
    ``alpha ** (-1 / N)``.

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


def statefulness(first: np.ndarray, fresh: np.ndarray, rows: np.ndarray, tolerance: float) -> Check:
    """``fresh`` (a second worker's log-probs of ``rows``, NaN elsewhere) against ``first``, the measured
    process's scores of the same rows."""
    diff = np.abs(fresh[rows].astype(np.float64) - first[rows].astype(np.float64))
    diff[~np.isfinite(diff)] = np.inf
    row, position = np.unravel_index(int(np.argmax(diff)), diff.shape)
    worst = float(diff.max())
    return Check(
        name="statefulness",
        passed=worst <= tolerance,
        evidence={
            "process": "a second, fresh worker of the package",
            "rows_compared": len(rows),
            "max_abs_logprob_diff": worst if np.isfinite(worst) else str(worst),
            "tolerance": tolerance,
            "worst": {"row": int(rows[row]), "position": int(position)},
        },
    )


def gate_consistency(
    source: list[np.ndarray],
    candidate: list[np.ndarray],
    items: list[str],
    *,
    verification_excess: float,
    ratio: tuple[float, float],
    margin: float,
) -> Check:
    """The candidate's excess cross-entropy on the source's greedy answers to the gate's questions against its
    excess on the verification set.

    ``source[i]``, ``candidate[i]``: the source's and the candidate's log-probs of the source's greedy answer to
    item ``items[i]``, token by token (the source's kept when ``A(p)`` was computed; the candidate's teacher-forced
    now). An honest package's logits are one function of the history, so its loss against the source on the
    gate's answers tracks its loss on the verification set; a package that bends its logits toward an answer key
    on the gate's prompts, and not on other text, is far from it on one side (a key that contradicts the source's
    answers: a large excess) or the other (a key that agrees with them: the package beats the source on its own
    answers). Passes iff ``low * v - margin <= gate <= high * v + margin`` with ``v = verification_excess``; an
    ``A(p)`` file that keeps no answers of the source fails it (one made before they were kept: recompute it)."""
    if not items:
        return Check(
            name="gate_consistency",
            passed=False,
            evidence={"error": "the A(p) file keeps none of the source's answer tokens: recompute it"},
        )
    excess = np.asarray([float(np.sum(s.astype(np.float64) - c.astype(np.float64))) for s, c in zip(source, candidate)])
    tokens = np.asarray([len(s) for s in source])
    gate = float(excess.sum() / max(1, tokens.sum()))
    low, high = ratio[0] * verification_excess - margin, ratio[1] * verification_excess + margin
    per_token = excess / np.maximum(tokens, 1)
    order = np.argsort(per_token)
    return Check(
        name="gate_consistency",
        passed=bool(np.isfinite(gate) and low <= gate <= high),
        evidence={
            "gate_excess_nats_per_token": gate,
            "verification_excess_nats_per_token": verification_excess,
            "band": [low, high],
            "ratio": list(ratio),
            "margin": margin,
            "items": len(items),
            "tokens": int(tokens.sum()),
            "items_beating_the_source": int(np.sum(excess < 0)),
            "lowest": [{"item": items[i], "excess_per_token": float(per_token[i])} for i in order[:3]],
            "highest": [{"item": items[i], "excess_per_token": float(per_token[i])} for i in order[::-1][:3]],
        },
    )
