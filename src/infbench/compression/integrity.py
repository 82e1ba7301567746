"""Integrity checks of a submission's forward pass (PROTOCOL A5.3, issues 3 and 17).

Each check returns a named pass/fail with its evidence:

- ``causality``, ``batch_invariance``, ``determinism``: probes hidden among the
  scoring requests (:mod:`infbench.compression.probes`);
- ``greedy_matches_argmax``: greedy generation equals the argmax of the scored
  logits on the same sequence (near-ties within ``tie_margin`` excepted);
- ``batch_invariance``: a sequence's log-probs alone and inside a batch agree;
- ``determinism``: the same call twice gives the same log-probs;
- ``likelihood_above_source``: by Gibbs' inequality no model assigns the source's
  samples a higher expected log-likelihood than the distribution they were drawn
  from, so a candidate whose PPL ratio against the sampler's own log-probs has a
  bootstrap lower bound above ``1 + slack`` is not scoring with its forward pass.

What the package can read, write or reach is not checked here but made impossible by the sandbox
(:mod:`infbench.sandbox`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from pydantic import BaseModel

from infbench.compression.scoring import bootstrap_ppl_ratio, ppl_ratio
from infbench.errors import InfbenchError


class Check(BaseModel):
    name: str
    passed: bool
    evidence: dict[str, Any] = {}


class CheckFailed(InfbenchError):
    """A named check that stops the measurement, with its evidence (e.g. ``logits_shape``)."""

    def __init__(self, check: str, evidence: dict[str, Any]):
        self.check, self.evidence = check, evidence
        super().__init__(f"{check}: {evidence}")


def _log_probs(logits: np.ndarray) -> np.ndarray:
    return torch.log_softmax(torch.from_numpy(logits).double(), -1).numpy()


def greedy_matches_argmax(logits: Callable, generate: Callable, prompt: list[int], n_new: int,
                          tie_margin: float, vocab: int) -> Check:
    tokens, _ = generate(prompt, n_new)
    outside = [t for t in tokens if not isinstance(t, int) or not 0 <= t < vocab]
    if outside:
        return Check(name="greedy_matches_argmax", passed=False,
                     evidence={"generated": len(tokens), "token_ids_outside_vocabulary": outside[:5],
                               "vocab": vocab})
    mismatches = []
    if tokens:
        seq = np.asarray([prompt + tokens], dtype=np.int64)
        lp = _log_probs(logits(seq[:, :-1], len(tokens)))[0]
        for j, tok in enumerate(tokens):
            best = int(np.argmax(lp[j]))
            if best != tok and lp[j, best] - lp[j, tok] > tie_margin:
                mismatches.append({"position": j, "generated": tok, "argmax": best,
                                   "gap": float(lp[j, best] - lp[j, tok])})
    return Check(name="greedy_matches_argmax", passed=not mismatches and len(tokens) == n_new,
                 evidence={"generated": len(tokens), "mismatches": mismatches[:5], "tie_margin": tie_margin})


def likelihood_above_source(sampler_logprobs: np.ndarray, logprobs: np.ndarray, *, temperature: float,
                            slack: float, n_resamples: int, seed: int) -> Check:
    """Fails when the candidate beats the sampling distribution on its own samples beyond ``slack``.

    The bound holds for samples drawn at temperature 1 (the protocol's): at another
    temperature the stored log-probs are not those of the sampling distribution,
    and the check passes, saying it does not apply.
    """
    f = ppl_ratio(sampler_logprobs, logprobs)
    lo, hi = bootstrap_ppl_ratio(sampler_logprobs, logprobs, n_resamples=n_resamples, seed=seed)
    evidence = {"f_vs_source_samples": f, "ci95": [lo, hi], "limit": 1.0 + slack, "temperature": temperature}
    if temperature != 1.0:
        return Check(name="likelihood_above_source", passed=True,
                     evidence={**evidence, "applies": False,
                               "why": "samples drawn at a temperature other than 1: Gibbs' bound does not apply"})
    return Check(name="likelihood_above_source", passed=lo <= 1.0 + slack, evidence={**evidence, "applies": True})

