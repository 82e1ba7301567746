"""The ``far_context`` check (PROTOCOL B5; not in the paper): a server must read the whole prompt.

The held-out replays' carriers (:mod:`infbench.serving.carriers`) end with a repeat of ids from
``distance`` positions back, which the reference, reading the whole prompt, tends to continue by copying;
without the far ids its top-1 is another id at nearly every output position. Up to ``far_context_checks``
answered post-warmup carriers of every final seed are scored: half of them those with the farthest sources
(the replays' context-limit canaries: where a server that keeps only the end of a prompt fails first), the
rest drawn with the operator's secret from the others. Each is scored as a fidelity suspect is
(teacher-forced on what the server streamed, with its full prompt; a carrier fidelity already scored is not
run again). A position is *clear* where the reference's top-1 log-probability exceeds the runner-up's by at
least ``far_context_margin``: there the streamed id must be the top-1. The check fails when more than
``far_context_max_miss_share`` of the clear positions miss it, or when no checked carrier has one.

On SmolLM2-135M (docs/server_submission.md) honest llama.cpp (F16) streamed the float32 reference's top-1 at
every one of 114 positions with a margin of at least 0.05 nats; a server that kept the last 64 ids missed it
at 60 to 85% of the positions at every margin.
"""

from __future__ import annotations

import numpy as np
import torch

from infbench.checks import Check
from infbench.config.model import VerifySettings
from infbench.serving.verify.fidelity import Candidate, Scores


def select(carriers: list[Candidate], k: int, rng: np.random.Generator) -> list[tuple[Candidate, str]]:
    """(carrier, why): the ``ceil(k / 2)`` farthest sources, then the rest of ``k`` drawn with ``rng``."""
    ranked = sorted(carriers, key=lambda c: -c.carrier.distance)
    far = ranked[: (k + 1) // 2]
    rest = ranked[len(far) :]
    drawn = [rest[int(i)] for i in rng.choice(len(rest), size=min(k - len(far), len(rest)), replace=False)]
    return [(c, "farthest source") for c in far] + [(c, "drawn with the secret") for c in drawn]


def clear_misses(scores: Scores, margin: float) -> tuple[int, list[int]]:
    """(clear positions, those of them where the output is not the reference's top-1)."""
    clear = (scores.top[:, 0] - scores.top[:, 1]) >= margin
    return int(clear.sum()), [int(i) for i in torch.nonzero(clear & (scores.regrets > 0)).flatten()]


def far_context(
    model, replays: list[Candidate], settings: VerifySettings, rng: np.random.Generator, drawn_with: str
) -> Check:
    carriers = [c for c in replays if c.carrier is not None]
    rows = []
    for c, why in select(carriers, settings.far_context_checks, rng):
        positions, misses = clear_misses(c.scored(model), settings.far_context_margin)
        rows.append(
            {
                "origin": c.origin,
                "why": why,
                "distance": c.carrier.distance,
                "prompt_tokens": c.prompt_tokens,
                "output_tokens": len(c.output),
                "clear_positions": positions,
                "misses": misses,
                "meets_reference": not misses,
            }
        )
    with_clear = [r for r in rows if r["clear_positions"]]
    positions = sum(r["clear_positions"] for r in rows)
    missed = sum(len(r["misses"]) for r in rows)
    allowed = settings.far_context_max_miss_share
    evidence = {
        "carriers_answered": len(carriers),
        "replay_candidates": len(replays),
        "checked": len(rows),
        "with_clear_positions": len(with_clear),
        "meeting_reference": sum(not r["misses"] for r in with_clear),
        "clear_positions": positions,
        "missed_positions": missed,
        "margin": settings.far_context_margin,
        "max_miss_share": allowed,
        "drawn_with": drawn_with,
        "carriers": rows,
    }

    def result(passed: bool, summary: str) -> Check:
        return Check(name="far_context", passed=passed, summary=summary, evidence=evidence)

    if settings.far_context_checks == 0:
        return result(True, "no far-context check configured")
    if not positions:  # nothing vouched for: no check passes by default
        return result(
            False,
            f"no clear position to check: {len(rows)} carriers checked of {len(carriers)} "
            f"answered in {len(replays)} post-warmup continuations",
        )
    span = f"sources {min(r['distance'] for r in rows)} to {max(r['distance'] for r in rows)} ids back"
    if missed > allowed * positions:
        worst = max((r for r in rows if r["misses"]), key=lambda r: r["distance"])
        return result(
            False,
            f"{missed} of {positions} clear positions in {len(rows)} carriers ({span}) "
            f"missed the reference's top-1 (at most {allowed:.0%} may), e.g. "
            f"{worst['origin']} (source {worst['distance']} ids back) at output position "
            f"{worst['misses'][0]}",
        )
    return result(
        True,
        f"{len(rows)} carriers checked ({span}): {positions - missed} of {positions} clear "
        f"positions streamed the reference's top-1",
    )
