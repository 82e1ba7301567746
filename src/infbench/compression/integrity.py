"""Integrity checks of a submission's forward pass (PROTOCOL A5.3, issue 3).

Each check returns a named pass/fail with its evidence:

- ``causality``: changing future tokens does not change earlier logits;
- ``greedy_matches_argmax``: greedy generation equals the argmax of the scored
  logits on the same sequence (near-ties within ``tie_margin`` excepted);
- ``batch_invariance``: a sequence's log-probs alone and inside a batch agree;
- ``determinism``: the same call twice gives the same log-probs.

What the package can read, write or reach is not checked here but made impossible by the sandbox
(:mod:`infbench.sandbox`).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from pydantic import BaseModel

from infbench.compression.scoring import target_log_probs


class Check(BaseModel):
    name: str
    passed: bool
    evidence: dict[str, Any] = {}


def _log_probs(logits: np.ndarray) -> np.ndarray:
    return torch.log_softmax(torch.from_numpy(logits).double(), -1).numpy()


def causality(logits: Callable, ids: np.ndarray, split: int, vocab: int, tol: float, seed: int) -> Check:
    rng = np.random.default_rng(seed)
    changed = ids.copy()
    changed[:, split:] = rng.integers(0, vocab, size=changed[:, split:].shape)
    n = ids.shape[1]
    a, b = _log_probs(logits(ids, n)), _log_probs(logits(changed, n))
    diff = float(np.max(np.abs(a[:, :split] - b[:, :split])))
    return Check(name="causality", passed=diff <= tol, evidence={"max_abs_logprob_diff_before_change": diff,
                                                                  "tolerance": tol, "changed_from": split})


def greedy_matches_argmax(logits: Callable, generate: Callable, prompt: list[int], n_new: int,
                          tie_margin: float) -> Check:
    tokens, _ = generate(prompt, n_new)
    seq = np.asarray([prompt + tokens], dtype=np.int64)
    lp = _log_probs(logits(seq[:, :-1], len(tokens)))[0]
    mismatches = []
    for j, tok in enumerate(tokens):
        best = int(np.argmax(lp[j]))
        if best != tok and lp[j, best] - lp[j, tok] > tie_margin:
            mismatches.append({"position": j, "generated": tok, "argmax": best,
                               "gap": float(lp[j, best] - lp[j, tok])})
    return Check(name="greedy_matches_argmax", passed=not mismatches and len(tokens) == n_new,
                 evidence={"generated": len(tokens), "mismatches": mismatches[:5], "tie_margin": tie_margin})


def _target_lp(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    n = logits.shape[1]
    return target_log_probs(torch.from_numpy(logits), torch.from_numpy(ids[:, -n:].astype(np.int64))).numpy()


def batch_invariance_and_determinism(logits: Callable, ids: np.ndarray, n_last: int, tol: float) -> list[Check]:
    together = _target_lp(logits(ids[:, :-1], n_last - 1), ids)
    alone = np.concatenate([_target_lp(logits(ids[i:i + 1, :-1], n_last - 1), ids[i:i + 1])
                            for i in range(ids.shape[0])])
    again = _target_lp(logits(ids[:, :-1], n_last - 1), ids)
    batch_diff = float(np.max(np.abs(together - alone)))
    repeat_diff = float(np.max(np.abs(together - again)))
    return [Check(name="batch_invariance", passed=batch_diff <= tol,
                  evidence={"max_abs_logprob_diff": batch_diff, "tolerance": tol}),
            Check(name="determinism", passed=repeat_diff <= tol,
                  evidence={"max_abs_logprob_diff": repeat_diff, "tolerance": tol})]

