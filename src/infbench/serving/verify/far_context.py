"""The ``far_context`` check (PROTOCOL B5; not in the paper): a server must read the whole prompt.

The held-out replays' carriers (:mod:`infbench.serving.carriers`) end with a repeat of ids from
``distance`` positions back, which the reference, reading the whole prompt, continues by copying. Up to
``far_context_checks`` answered post-warmup carriers of every final seed are scored: half of them those
with the farthest sources (the replays' context-limit canaries: where a server that keeps only the end of a
prompt fails first), the rest drawn with the operator's secret from the others. Each is scored as a fidelity
suspect is (teacher-forced on what the server streamed, its full prompt; a carrier fidelity already scored
is not run again). At every output position where the reference is *confident* (its top-1 log-probability
at least ``far_context_margin`` above the runner-up's, so that no honest difference of numerics can swap
them), the streamed id must be the reference's top-1; the check fails if any checked carrier misses one.
"""

from __future__ import annotations

import numpy as np
import torch

from infbench.serving.verify.common import CheckResult, VerifySettings
from infbench.serving.verify.fidelity import Candidate, Scores


def select(carriers: list[Candidate], k: int, rng: np.random.Generator) -> list[tuple[Candidate, str]]:
    """(carrier, why): the ``ceil(k / 2)`` farthest sources, then the rest of ``k`` drawn with ``rng``."""
    ranked = sorted(carriers, key=lambda c: -c.carrier.distance)
    far = ranked[:(k + 1) // 2]
    rest = ranked[len(far):]
    drawn = [rest[int(i)] for i in rng.choice(len(rest), size=min(k - len(far), len(rest)), replace=False)]
    return [(c, "farthest source") for c in far] + [(c, "drawn with the secret") for c in drawn]


def confident_misses(scores: Scores, margin: float) -> tuple[int, list[int]]:
    """(confident positions, those where the output is not the reference's top-1)."""
    confident = (scores.top[:, 0] - scores.top[:, 1]) >= margin
    return int(confident.sum()), [int(i) for i in torch.nonzero(confident & (scores.regrets > 0)).flatten()]


def far_context(model, replays: list[Candidate], settings: VerifySettings, rng: np.random.Generator,
                drawn_with: str) -> CheckResult:
    carriers = [c for c in replays if c.carrier is not None]
    chosen = select(carriers, settings.far_context_checks, rng)
    rows = []
    for c, why in chosen:
        positions, misses = confident_misses(c.scored(model), settings.far_context_margin)
        rows.append({"origin": c.origin, "why": why, "distance": c.carrier.distance, "prompt_tokens": c.prompt_tokens,
                     "output_tokens": len(c.output), "confident_positions": positions, "misses": misses,
                     "meets_reference": not misses})
    confident = [r for r in rows if r["confident_positions"]]
    failed = [r for r in rows if r["misses"]]
    evidence = {"carriers_answered": len(carriers), "replay_candidates": len(replays), "checked": len(rows),
                "with_confident_positions": len(confident), "meeting_reference": len(confident) - len(failed),
                "margin": settings.far_context_margin, "drawn_with": drawn_with, "carriers": rows}
    if settings.far_context_checks == 0:
        return CheckResult(name="far_context", passed=True, evidence=evidence, summary="no far-context check configured")
    if not confident:  # nothing vouched for: no check passes by default
        return CheckResult(name="far_context", passed=False, evidence=evidence, summary=(
            f"no confident position to check: {len(rows)} carriers checked of {len(carriers)} answered in "
            f"{len(replays)} post-warmup continuations"))
    if failed:
        worst = max(failed, key=lambda r: r["distance"])
        return CheckResult(name="far_context", passed=False, evidence=evidence, summary=(
            f"{len(failed)} of {len(confident)} checked carriers missed the reference's confident top-1, e.g. "
            f"{worst['origin']} (source {worst['distance']} ids back) at output position {worst['misses'][0]}"))
    return CheckResult(name="far_context", passed=True, evidence=evidence, summary=(
        f"{len(rows)} carriers checked (sources {min(r['distance'] for r in rows)} to "
        f"{max(r['distance'] for r in rows)} ids back): every one of {sum(r['confident_positions'] for r in rows)} "
        f"confident positions in {len(confident)} of them streamed the reference's top-1"))
