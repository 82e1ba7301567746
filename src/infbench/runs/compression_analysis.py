"""CompressionBench trajectory analyses (PROTOCOL A8) from run records."""

from __future__ import annotations

import math
from datetime import datetime

from pydantic import BaseModel

from infbench.compression.submission import GIB
from infbench.runs.schema import (
    CompletionDeclared,
    RewardCall,
    RunRecord,
    VersionPublished,
)


def hours(record: RunRecord, t: datetime) -> float:
    return (t - record.spec.start).total_seconds() / 3600


def rewards(record: RunRecord) -> list[RewardCall]:
    return [e for e in record.events if isinstance(e, RewardCall)]


class BestSoFarRow(BaseModel):
    run: str
    call: int
    t_hours: float
    ppl: float | None
    reward: float
    best_ppl: float | None  # lowest PPL of a call with a positive reward so far


def best_so_far(records: list[RunRecord]) -> list[BestSoFarRow]:
    rows = []
    for rec in records:
        best = None
        for i, call in enumerate(rewards(rec), start=1):
            if call.reward > 0 and call.ppl is not None:
                best = call.ppl if best is None else min(best, call.ppl)
            rows.append(
                BestSoFarRow(
                    run=rec.run, call=i, t_hours=hours(rec, call.time), ppl=call.ppl, reward=call.reward, best_ppl=best
                )
            )
    return rows


OUTCOMES = ("new best", "same as best", "worse")


def outcome(reward: float, best: float | None, tolerance: float) -> str:
    """A reward evaluation against the best reward before it: new best / same as best (within
    ``tolerance``) / worse. The first evaluation of a run is a new best."""
    if best is None or reward > best + tolerance:
        return "new best"
    return "same as best" if abs(reward - best) <= tolerance else "worse"


class OutcomeRow(BaseModel):
    run: str
    quarter: int  # 1..4: quarter of the run's start..end
    new_best: int
    same_as_best: int
    worse: int


def quarter(record: RunRecord, t: datetime) -> int:
    span = (record.spec.end - record.spec.start).total_seconds()
    return min(4, 1 + int(4 * (t - record.spec.start).total_seconds() / span))


def outcomes(records: list[RunRecord], tolerance: float) -> list[OutcomeRow]:
    rows = []
    for rec in records:
        counts = {q: dict.fromkeys(OUTCOMES, 0) for q in (1, 2, 3, 4)}
        best = None
        for call in rewards(rec):
            counts[quarter(rec, call.time)][outcome(call.reward, best, tolerance)] += 1
            best = call.reward if best is None else max(best, call.reward)
        rows += (
            [
                OutcomeRow(
                    run=rec.run, quarter=q, new_best=c["new best"], same_as_best=c["same as best"], worse=c["worse"]
                )
                for q, c in counts.items()
            ]
            if rewards(rec)
            else []
        )
    return rows


class RankingPairRow(BaseModel):
    run: str
    metric: str
    before: str
    after: str
    local_prefers: str  # the version with the lower local metric
    feedback_prefers: str | None  # the version with the higher reward; None on a tie
    verdict: str  # confirmed / reversed / tie


def ranking_pairs(records: list[RunRecord], tolerance: float) -> list[RankingPairRow]:
    """Consecutive published versions that share a local metric: the local ranking (lower is
    better) against the reward feedback on both (the first reward of the later version after its
    publication, and the latest reward of the earlier one before that)."""
    rows = []
    for rec in records:
        versions = [e for e in rec.events if isinstance(e, VersionPublished)]
        calls = rewards(rec)
        for a, b in zip(versions, versions[1:]):
            fb_b = next((c for c in calls if c.content_hash == b.content_hash and c.time >= b.time), None)
            if fb_b is None:
                continue
            fb_a = [c for c in calls if c.content_hash == a.content_hash and c.time <= fb_b.time]
            if not fb_a:
                continue
            ra, rb = fb_a[-1].reward, fb_b.reward
            feedback = None if abs(ra - rb) <= tolerance else (a.version if ra > rb else b.version)
            for metric in sorted(set(a.local_metrics) & set(b.local_metrics)):
                ma, mb = a.local_metrics[metric], b.local_metrics[metric]
                local = a.version if ma < mb else b.version
                verdict = "tie" if feedback is None else ("confirmed" if feedback == local else "reversed")
                rows.append(
                    RankingPairRow(
                        run=rec.run,
                        metric=metric,
                        before=a.version,
                        after=b.version,
                        local_prefers=local,
                        feedback_prefers=feedback,
                        verdict=verdict,
                    )
                )
    return rows


class RevisionRow(BaseModel):
    run: str
    before: str
    after: str
    t_hours: float
    e_before: float  # E = ln(PPL / PPL_BF16)
    e_after: float
    effect_pct: float  # 100 (E_after / E_before - 1)
    size_change_gib: float | None
    size_band: str  # "within band" or "size changed"


def revisions(records: list[RunRecord], band_gib: float) -> list[RevisionRow]:
    """Consecutive scored reward calls on different packages (a revision), with the excess
    cross-entropy effect, grouped by package-size change (within ``band_gib`` or not)."""
    rows = []
    for rec in records:
        scored = [c for c in rewards(rec) if c.ppl and c.ref_ppl and c.content_hash]
        for a, b in zip(scored, scored[1:]):
            if a.content_hash == b.content_hash:
                continue
            ea, eb = math.log(a.ppl / a.ref_ppl), math.log(b.ppl / b.ref_ppl)
            if abs(ea) < 1e-12:
                continue
            size = None if a.s_pkg_bytes is None or b.s_pkg_bytes is None else (b.s_pkg_bytes - a.s_pkg_bytes) / GIB
            rows.append(
                RevisionRow(
                    run=rec.run,
                    before=a.submission,
                    after=b.submission,
                    t_hours=hours(rec, b.time),
                    e_before=ea,
                    e_after=eb,
                    effect_pct=100 * (eb / ea - 1),
                    size_change_gib=size,
                    size_band="within band" if size is not None and abs(size) <= band_gib else "size changed",
                )
            )
    return rows


class StoppingRow(BaseModel):
    run: str
    first_completion_h: float | None
    last_weight_change_h: float | None
    declared_before_last_change: bool | None
    gap_h: float | None  # last weight change - first completion declaration


def stopping(records: list[RunRecord]) -> list[StoppingRow]:
    """First completion declaration vs the last weight change (the last published version, or
    else reward call, whose package differs from the one before it)."""
    rows = []
    for rec in records:
        completions = [e for e in rec.events if isinstance(e, CompletionDeclared)]
        packages = [(e.time, e.content_hash) for e in rec.events if isinstance(e, VersionPublished)] or [
            (c.time, c.content_hash) for c in rewards(rec)
        ]
        changes = [t for (t, h), (_, prev) in zip(packages, [(None, None), *packages]) if h != prev]
        first = hours(rec, completions[0].time) if completions else None
        last = hours(rec, changes[-1]) if changes else None
        both = first is not None and last is not None
        rows.append(
            StoppingRow(
                run=rec.run,
                first_completion_h=first,
                last_weight_change_h=last,
                declared_before_last_change=first < last if both else None,
                gap_h=last - first if both else None,
            )
        )
    return rows
