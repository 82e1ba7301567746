"""Integrity probes hidden among the scoring requests of final verification (PROTOCOL A5.3).

The verification set is scored in requests of up to ``score_batch_size`` rows:
``(b, L + M - 1)`` token ids (context and continuation but its last token),
asking for the logits of the last ``n_last = M`` positions. Each probe is a
request of exactly that kind, with the size of one of the scoring requests,
built from the real rows, and placed among the scoring requests at a position
drawn from the operator secret (with which rows, donors and splits):

- ``causality``: each row is a real row whose tokens from a split point on are
  another real row's tokens at the same positions. A causal model's log-probs of
  the original tokens up to the split (the position predicting the first
  replaced token included) equal the original row's scores;
- ``batch_invariance``: real rows in another batch composition, compared with
  their scores;
- ``determinism``: a scoring request sent again unchanged, compared with its scores.

A package that treats scoring-shaped calls differently from other calls (say,
peeks at the next input token) cannot tell these from scoring requests, so a
look-ahead shows up in ``causality`` at the split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np
import torch
from tqdm import tqdm

from infbench.compression.integrity import Check
from infbench.compression.scoring import target_log_probs

Kind = Literal["score", "causality", "batch_invariance", "determinism"]
PROBE_KINDS: tuple[Kind, ...] = ("causality", "batch_invariance", "determinism")


@dataclass(frozen=True)
class Request:
    """One logits request: ``ids`` ``(b, L + M - 1)`` sent with ``n_last = M``.

    ``rows``: the real row each request row stands for (whose continuation tokens
    are scored); causality also has each row's ``donors`` and ``last_same``, the
    last continuation position whose history is unchanged (the split, minus ``L``).
    """

    kind: Kind
    rows: np.ndarray
    ids: np.ndarray
    donors: np.ndarray | None = None
    last_same: np.ndarray | None = None


def _batches(n: int, batch_size: int) -> list[np.ndarray]:
    return [np.arange(start, min(n, start + batch_size)) for start in range(0, n, batch_size)]


def plan(contexts: np.ndarray, continuations: np.ndarray, batch_size: int, probe_requests: int,
         seed: int) -> list[Request]:
    """The scoring requests in order, with ``probe_requests`` probes of each kind at positions drawn by ``seed``."""
    n, length = contexts.shape
    m = continuations.shape[1]
    if n < 2 or m < 2:
        raise ValueError(f"integrity probes need at least 2 rows of at least 2 continuation tokens ({n} x {m})")
    inputs = np.concatenate([contexts, continuations[:, :-1]], axis=1).astype(np.int64)
    scoring = [Request("score", rows, inputs[rows]) for rows in _batches(n, batch_size)]
    rng = np.random.default_rng(seed)
    probes = []
    for _ in range(probe_requests):
        like = scoring[int(rng.integers(len(scoring)))]
        probes.append(Request("determinism", like.rows, like.ids.copy()))
        rows = rng.permutation(n)[:len(scoring[int(rng.integers(len(scoring)))].rows)]
        probes.append(Request("batch_invariance", rows, inputs[rows]))
        rows = rng.permutation(n)[:len(scoring[int(rng.integers(len(scoring)))].rows)]
        donors = (rows + rng.integers(1, n, size=len(rows))) % n
        splits = length + rng.integers(0, m - 1, size=len(rows))  # first replaced input position
        ids = inputs[rows].copy()
        for k, (donor, split) in enumerate(zip(donors, splits)):
            ids[k, split:] = inputs[donor, split:]
        probes.append(Request("causality", rows, ids, donors=donors, last_same=splits - length))
    schedule = list(scoring)
    for probe in probes:
        schedule.insert(int(rng.integers(0, len(schedule) + 1)), probe)
    return schedule


@dataclass(frozen=True)
class Answered:
    position: int  # index of the request in the schedule
    request: Request
    logprobs: np.ndarray  # (b, M): log-probs of the rows' real continuation tokens


def run(logits: Callable[[np.ndarray, int], np.ndarray], schedule: list[Request], continuations: np.ndarray,
        progress: bool = True) -> tuple[np.ndarray, list[Answered]]:
    """Send every request; the scored log-probs ``[n, M]`` of the real rows and the answered probes."""
    n, m = continuations.shape
    scored = np.full((n, m), np.nan, dtype=np.float32)
    answered = []
    for position, request in enumerate(tqdm(schedule, desc="score", unit="request", disable=not progress)):
        out = torch.from_numpy(np.asarray(logits(request.ids, m)))
        target = torch.from_numpy(continuations[request.rows].astype(np.int64))
        lp = target_log_probs(out, target).numpy()
        if request.kind == "score":
            scored[request.rows] = lp
        else:
            answered.append(Answered(position, request, lp))
    return scored, answered


def _row_differences(a: Answered, scored: np.ndarray) -> list[tuple[float, dict]]:
    """Per probe row: the largest |log-prob - score| over the positions that must agree, and where."""
    r, m = a.request, scored.shape[1]
    out = []
    for k, row in enumerate(r.rows):
        upto = m if r.last_same is None else int(r.last_same[k]) + 1
        diff = np.abs(a.logprobs[k, :upto].astype(np.float64) - scored[row, :upto])
        diff[~np.isfinite(diff)] = np.inf
        where = {"request": a.position, "row": int(row), "position": int(np.argmax(diff))}
        if r.donors is not None:
            where |= {"donor": int(r.donors[k]), "positions_compared": upto}
        out.append((float(diff.max()), where))
    return out


def checks(scored: np.ndarray, answered: list[Answered], tolerance: float) -> list[Check]:
    """One check per probe kind: the largest log-prob difference from the scores, against ``tolerance``."""
    out = []
    for kind in PROBE_KINDS:
        probes = [a for a in answered if a.request.kind == kind]
        rows = [d for a in probes for d in _row_differences(a, scored)]
        worst, where = max(rows, key=lambda d: d[0]) if rows else (float("nan"), None)
        out.append(Check(name=kind, passed=bool(rows) and worst <= tolerance,
                         evidence={"max_abs_logprob_diff": worst if np.isfinite(worst) else str(worst),
                                   "tolerance": tolerance,
                                   "requests": [a.position for a in probes], "worst": where}))
    return out
