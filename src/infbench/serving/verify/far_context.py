"""The ``far_context`` check (PROTOCOL B5; not in the paper): a server must read the whole prompt of every
request, whichever it is.

Up to ``far_context_checks`` answered post-warmup continuations of every final seed are drawn with the operator's
secret, after the replay, uniformly from all of them: far-context carriers (:mod:`infbench.serving.carriers`,
whose last ids repeat ids from ``distance`` back) and ordinary requests alike, so a server that finds the
carriers by content (their last 16 ids occur earlier in the prompt) and is honest only there is checked on the
others as often as they were served. Each is scored as a fidelity suspect is (teacher-forced on what the server
streamed, with its full prompt; a continuation fidelity already scored is not run again). A position is *clear*
where the reference's top-1 log-probability exceeds the runner-up's by at least ``far_context_margin``: there the
streamed id must be the top-1. The check fails when more than ``far_context_max_miss_share`` of the clear
positions miss it, or when no checked continuation has one.

On SmolLM2-135M (docs/server_submission.md) honest llama.cpp (F16) and S0 streamed the float32 reference's top-1
at nearly every clear position, carriers or not; a server that kept the last 64 ids missed it at 60 to 85% of a
carrier's clear positions and at about 40% of an ordinary prompt's (150 of 360: the next id still depends on ids
more than 64 back).
"""

from __future__ import annotations

import numpy as np
import torch

from infbench.checks import Check
from infbench.config.model import VerifySettings
from infbench.serving.verify.fidelity import Candidate, Scores


def select(replays: list[Candidate], k: int, rng: np.random.Generator) -> list[tuple[Candidate, str]]:
    """(continuation, why): ``k`` drawn with ``rng`` from every post-warmup continuation (carriers or not)."""
    drawn = rng.choice(len(replays), size=min(k, len(replays)), replace=False) if replays else []
    return [
        (replays[int(i)], "carrier, drawn with the secret" if replays[int(i)].carrier else "drawn with the secret")
        for i in sorted(drawn)
    ]


def clear_misses(scores: Scores, margin: float) -> tuple[int, list[int]]:
    """(clear positions, those of them where the output is not the reference's top-1)."""
    clear = (scores.top[:, 0] - scores.top[:, 1]) >= margin
    return int(clear.sum()), [int(i) for i in torch.nonzero(clear & (scores.regrets > 0)).flatten()]


def far_context(
    model, replays: list[Candidate], settings: VerifySettings, rng: np.random.Generator, drawn_with: str
) -> Check:
    carriers = [c for c in replays if c.carrier is not None]
    rows = []
    for c, why in select(replays, settings.far_context_checks, rng):
        positions, misses = clear_misses(c.scored(model), settings.far_context_margin)
        rows.append(
            {
                "origin": c.origin,
                "why": why,
                "carrier": c.carrier is not None,
                "distance": c.carrier.distance if c.carrier else None,
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
        "carriers_checked": sum(r["carrier"] for r in rows),
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
            f"no clear position to check: {len(rows)} of {len(replays)} post-warmup continuations checked "
            f"({len(carriers)} of them carriers)",
        )
    checked = f"{len(rows)} continuations ({sum(r['carrier'] for r in rows)} carriers)"
    if missed > allowed * positions:
        worst = max((r for r in rows if r["misses"]), key=lambda r: len(r["misses"]))
        where = f"source {worst['distance']} ids back" if worst["carrier"] else "not a carrier"
        return result(
            False,
            f"{missed} of {positions} clear positions in {checked} missed the reference's top-1 (at most "
            f"{allowed:.0%} may), e.g. {worst['origin']} ({where}, {worst['prompt_tokens']} prompt ids) at output "
            f"position {worst['misses'][0]}",
        )
    return result(
        True,
        f"{checked} checked: {positions - missed} of {positions} clear positions streamed the reference's top-1",
    )
