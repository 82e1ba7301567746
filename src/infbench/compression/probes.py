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

One process can still hide a look-ahead from these: a package that remembers what it answered for each
causal prefix (a hash of the tokens up to a position) and repeats it whenever the prefix comes again answers
a probe exactly as it answered the original, whichever came first. So final verification also asks a
second, fresh worker process of the same package (check ``statefulness``, :func:`plan_fresh`): rows whose
tokens from a split on are another row's, each sent before its original and among ordinary rows, then the
originals among other ordinary rows, every answer compared with the first process's scores. Before the
original it has never seen the original's token at the split, so a package that peeks at the next input
token puts the look-ahead on the donor's token there, and one that remembers then repeats that for the
original; an honest, stateless package answers the same rows the same in any process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from tqdm import tqdm

from infbench.checks import Check
from infbench.compression.scoring import target_log_probs
from infbench.errors import ConfigError

Kind = Literal["score", "causality", "batch_invariance", "determinism", "statefulness"]
PROBE_KINDS: tuple[Kind, ...] = ("causality", "batch_invariance", "determinism")
Role = Literal["stitched", "original", "ordinary"]


@dataclass(frozen=True)
class Request:
    """One logits request: ``ids`` ``(b, L + M - 1)`` sent with ``n_last = M``.

    ``rows``: the real row each request row stands for (whose continuation tokens
    are scored); causality also has each row's ``donors`` and ``last_same``, the
    last continuation position whose history is unchanged (the split, minus ``L``).
    A ``statefulness`` request mixes rows of three ``roles``: stitched as causality
    rows (``donors[k] >= 0``), and originals and ordinary rows (``donors[k] == -1``,
    ``last_same[k] == M - 1``: every position compared).
    """

    kind: Kind
    rows: np.ndarray
    ids: np.ndarray
    donors: np.ndarray | None = None
    last_same: np.ndarray | None = None
    roles: tuple[Role, ...] | None = None


def _batches(n: int, batch_size: int) -> list[np.ndarray]:
    return [np.arange(start, min(n, start + batch_size)) for start in range(0, n, batch_size)]


def request_sizes(n: int, batch_size: int) -> list[int]:
    """The sizes (rows) of the requests :func:`plan` and :func:`plan_fresh` send for ``n`` rows."""
    return sorted({len(rows) for rows in _batches(n, batch_size)})


def plan(
    contexts: np.ndarray, continuations: np.ndarray, batch_size: int, probe_requests: int, seed: int
) -> list[Request]:
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
        rows = rng.permutation(n)[: len(scoring[int(rng.integers(len(scoring)))].rows)]
        probes.append(Request("batch_invariance", rows, inputs[rows]))
        rows = rng.permutation(n)[: len(scoring[int(rng.integers(len(scoring)))].rows)]
        donors = (rows + rng.integers(1, n, size=len(rows))) % n
        splits = length + rng.integers(0, m - 1, size=len(rows))  # first replaced input position
        probes.append(
            Request("causality", rows, _stitch(inputs, rows, donors, splits), donors=donors, last_same=splits - length)
        )
    schedule = list(scoring)
    for probe in probes:
        schedule.insert(int(rng.integers(0, len(schedule) + 1)), probe)
    return schedule


def _stitch(inputs: np.ndarray, rows: np.ndarray, donors: np.ndarray, splits: np.ndarray) -> np.ndarray:
    """``rows``' inputs, each with its tokens from its split on taken from its donor (same positions)."""
    ids = inputs[rows].copy()
    for k, (donor, split) in enumerate(zip(donors, splits)):
        ids[k, split:] = inputs[donor, split:]
    return ids


def plan_fresh(
    contexts: np.ndarray, continuations: np.ndarray, batch_size: int, stitched: int, seed: int
) -> list[Request]:
    """The two requests for a second, fresh worker process (check ``statefulness``), drawn by ``seed``.

    The first holds ``stitched`` rows made as causality rows (a row's own tokens up to a split, another
    row's after it) among ordinary rows that are none of their originals; the second those originals among
    other ordinary rows. Both have the size of a full scoring request, rows in a random order; ``stitched``
    is capped at one row less than that size.
    """
    n, length = contexts.shape
    m = continuations.shape[1]
    size = min(batch_size, n)
    if size < 2 or m < 2:
        raise ConfigError(
            "verification.score_batch_size",
            f"a second worker's probes need scoring requests of 2 rows ({size} here) and 2 "
            f"continuation tokens ({m} here)",
        )
    stitched = min(stitched, size - 1)
    inputs = np.concatenate([contexts, continuations[:, :-1]], axis=1).astype(np.int64)
    rng = np.random.default_rng(seed)
    originals = rng.permutation(n)[:stitched]
    donors = (originals + rng.integers(1, n, size=stitched)) % n
    splits = length + rng.integers(0, m - 1, size=stitched)
    others = np.setdiff1d(np.arange(n), originals)

    def request(rows: np.ndarray, ids: np.ndarray, donor: np.ndarray, last_same: np.ndarray, role: Role) -> Request:
        fill = rng.choice(others, size=size - stitched, replace=False)
        order = rng.permutation(size)
        roles = [role] * stitched + ["ordinary"] * len(fill)
        return Request(
            "statefulness",
            np.concatenate([rows, fill])[order],
            np.concatenate([ids, inputs[fill]])[order],
            donors=np.concatenate([donor, np.full(len(fill), -1)])[order],
            last_same=np.concatenate([last_same, np.full(len(fill), m - 1)])[order],
            roles=tuple(roles[i] for i in order),
        )

    everything = np.full(stitched, m - 1)
    stitched_ids = _stitch(inputs, originals, donors, splits)
    return [
        request(originals, stitched_ids, donors, splits - length, "stitched"),
        request(originals, inputs[originals], np.full(stitched, -1), everything, "original"),
    ]


@dataclass(frozen=True)
class Answered:
    position: int  # index of the request in the schedule
    request: Request
    logprobs: np.ndarray  # (b, M): log-probs of the rows' real continuation tokens


def run(
    logits: Callable[[np.ndarray, int], np.ndarray],
    schedule: list[Request],
    continuations: np.ndarray,
    progress: bool = True,
    observe: Callable[[np.ndarray, torch.Tensor], None] | None = None,
) -> tuple[np.ndarray, list[Answered]]:
    """Send every request; the scored log-probs ``[n, M]`` of the real rows and the answered probes.
    ``observe(rows, logits)`` sees the raw logits of every scoring request (the divergence diagnostics)."""
    n, m = continuations.shape
    scored = np.full((n, m), np.nan, dtype=np.float32)
    answered = []
    for position, request in enumerate(tqdm(schedule, desc="score", unit="request", disable=not progress)):
        out = torch.from_numpy(np.asarray(logits(request.ids, m)))
        target = torch.from_numpy(continuations[request.rows].astype(np.int64))
        lp = target_log_probs(out, target).numpy()
        if request.kind == "score":
            scored[request.rows] = lp
            if observe is not None:
                observe(request.rows, out)
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
        if r.roles is not None:
            where["role"] = r.roles[k]
        if r.donors is not None and r.donors[k] >= 0:
            where |= {"donor": int(r.donors[k]), "positions_compared": upto}
        out.append((float(diff.max()), where))
    return out


def _check(name: str, answered: list[Answered], scored: np.ndarray, tolerance: float, **evidence) -> Check:
    """The largest log-prob difference of ``answered``'s rows from the scores, against ``tolerance``."""
    rows = [d for a in answered for d in _row_differences(a, scored)]
    worst, where = max(rows, key=lambda d: d[0]) if rows else (float("nan"), None)
    return Check(
        name=name,
        passed=bool(rows) and worst <= tolerance,
        evidence={
            "max_abs_logprob_diff": worst if np.isfinite(worst) else str(worst),
            "tolerance": tolerance,
            "requests": [a.position for a in answered],
            "rows_compared": len(rows),
            "worst": where,
            **evidence,
        },
    )


def checks(scored: np.ndarray, answered: list[Answered], tolerance: float) -> list[Check]:
    """One check per probe kind: the largest log-prob difference from the scores, against ``tolerance``."""
    return [_check(kind, [a for a in answered if a.request.kind == kind], scored, tolerance) for kind in PROBE_KINDS]


def statefulness(scored: np.ndarray, fresh: list[Answered], tolerance: float) -> Check:
    """The second process's answers (:func:`plan_fresh`) against the first process's scores."""
    stitched = sum(role == "stitched" for a in fresh for role in a.request.roles or ())
    return _check(
        "statefulness",
        fresh,
        scored,
        tolerance,
        process="a second, fresh worker of the package",
        stitched_rows=stitched,
    )
