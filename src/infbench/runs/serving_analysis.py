"""ServerBench trajectory analyses (PROTOCOL B6) from run records."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from infbench.runs.compression_analysis import hours
from infbench.runs.schema import LoadChange, ReplayCall, RunRecord

PATH_CLASSES = ("raise & hold", "retreat", "oscillate", "never tuned")


def active_hours(record: RunRecord, t: datetime, idle_gap_s: float) -> float:
    """Agent-active time at ``t``: time since the start, with every gap between consecutive
    events longer than ``idle_gap_s`` counted as ``idle_gap_s``."""
    stamps = [record.spec.start, *(e.time for e in record.events if e.time <= t), t]
    return sum(min((b - a).total_seconds(), idle_gap_s) for a, b in zip(stamps, stamps[1:])) / 3600


def concurrency_path(record: RunRecord) -> list[tuple[datetime, int]]:
    """Concurrency over time from load changes and replays, repeated values dropped."""
    path: list[tuple[datetime, int]] = []
    for e in record.events:
        if isinstance(e, (LoadChange, ReplayCall)) and (not path or path[-1][1] != e.concurrency):
            path.append((e.time, e.concurrency))
    return path


def classify(values: list[int]) -> str:
    """The path's class from its moves (consecutive values differ):
    no move: never tuned; every move up: raise & hold; moves up then only down, or only down
    (it ends below its peak and never climbs back): retreat; anything else (a climb after a
    descent): oscillate."""
    moves = [b > a for a, b in zip(values, values[1:]) if a != b]
    if not moves:
        return "never tuned"
    if all(moves):
        return "raise & hold"
    first_down = moves.index(False)
    return "retreat" if not any(moves[first_down:]) else "oscillate"


class PathRow(BaseModel):
    run: str
    path: str
    moves: int
    final: int | None
    peak: int | None
    classification: str


class PathPoint(BaseModel):
    run: str
    classification: str  # the run's path class
    active_h: float
    concurrency: int


def concurrency_paths(records: list[RunRecord], idle_gap_s: float) -> tuple[list[PathRow], list[PathPoint]]:
    rows, points = [], []
    for rec in records:
        path = concurrency_path(rec)
        values = [c for _, c in path]
        rows.append(
            PathRow(
                run=rec.run,
                path=" > ".join(map(str, values)),
                moves=max(0, len(values) - 1),
                final=values[-1] if values else None,
                peak=max(values) if values else None,
                classification=classify(values),
            )
        )
        points += [
            PathPoint(
                run=rec.run,
                classification=rows[-1].classification,
                active_h=active_hours(rec, t, idle_gap_s),
                concurrency=c,
            )
            for t, c in path
        ]
    return rows, points


class FirstUsableRow(BaseModel):
    run: str
    replays: int
    first_usable_h: float | None  # wall hours to the first replay that completed requests with D > 0
    first_usable_active_h: float | None


def first_usable(records: list[RunRecord], idle_gap_s: float) -> list[FirstUsableRow]:
    rows = []
    for rec in records:
        replays = [e for e in rec.events if isinstance(e, ReplayCall)]
        usable = next((e for e in replays if e.completed > 0 and (e.D or 0) > 0), None)
        rows.append(
            FirstUsableRow(
                run=rec.run,
                replays=len(replays),
                first_usable_h=hours(rec, usable.time) if usable else None,
                first_usable_active_h=active_hours(rec, usable.time, idle_gap_s) if usable else None,
            )
        )
    return rows


class MatchedSeedRow(BaseModel):
    run: str
    before: str
    after: str
    seed: int
    d_ratio: float | None
    g_ratio: float | None
    f_ratio: float | None


def _ratio(after: float | None, before: float | None) -> float | None:
    return after / before if after is not None and before not in (None, 0) else None


def matched_seeds(records: list[RunRecord]) -> list[MatchedSeedRow]:
    """Consecutive versions (content hashes in order of first replay) replayed on the same seed:
    after / before of D, G and f (each version's last replay on that seed)."""
    rows = []
    for rec in records:
        replays = [e for e in rec.events if isinstance(e, ReplayCall)]
        order = list(dict.fromkeys(e.content_hash for e in replays))
        last = {(e.content_hash, e.seed): e for e in replays}
        for a, b in zip(order, order[1:]):
            for seed in sorted({s for h, s in last if h == a} & {s for h, s in last if h == b}):
                x, y = last[(a, seed)], last[(b, seed)]
                rows.append(
                    MatchedSeedRow(
                        run=rec.run,
                        before=a[:12],
                        after=b[:12],
                        seed=seed,
                        d_ratio=_ratio(y.D, x.D),
                        g_ratio=_ratio(y.G, x.G),
                        f_ratio=_ratio(y.f, x.f),
                    )
                )
    return rows
