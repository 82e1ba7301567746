"""Workload coverage (PROTOCOL B4, paper App. E.5): where a seed's draw lies among 128 extra seeds.

Per draw (the first ``sessions`` sessions of a seed's sequence): total input
tokens, subagent branch count, requests, and *initial stream availability* =
the request streams (main chain and subagent branches) of the first
``concurrency`` sessions that have a request waiting for no response when each
lane begins at its sampled start point (as the replay does), i.e. the
independent streams ready to advance when the replay begins. The development,
final and calibration draws get their percentile within the scan.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import pandas as pd
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.config.model import ServingCore
from infbench.serving import workload
from infbench.serving.sessions import Session

METRICS = ("initial_streams", "input_tokens", "branches", "requests")


class CoverageRow(BaseModel):
    seed_set: str
    seed: int
    initial_streams: int
    input_tokens: int
    branches: int
    requests: int
    pct_initial_streams: float | None = None
    pct_input_tokens: float | None = None
    pct_branches: float | None = None
    pct_requests: float | None = None


def draw_stats(
    sessions: list[Session], seed: int, n: int, concurrency: int, start_ratio: tuple[float, float], seed_set: str
) -> CoverageRow:
    drawn = list(itertools.islice(workload.draw(sessions, seed), max(n, concurrency)))
    streams = sum(
        workload.initial_streams(s, workload.lane_start(s, workload.start_fraction(seed, lane, start_ratio)))
        for lane, s in enumerate(drawn[:concurrency])
    )
    drawn = drawn[:n]
    return CoverageRow(
        seed_set=seed_set,
        seed=seed,
        initial_streams=streams,
        input_tokens=sum(s.total_input_tokens for s in drawn),
        branches=sum(s.n_subagents for s in drawn),
        requests=sum(len(s.requests) for s in drawn),
    )


def scan(sessions_path: str, serving: ServingCore, out_csv: str, out_json: str) -> pd.DataFrame:
    t0 = time.perf_counter()
    sessions = workload.load(sessions_path)
    cov = serving.coverage
    n, c = cov.sessions, cov.concurrency
    start_ratio = serving.replay.start_ratio
    extra = [draw_stats(sessions, s, n, c, start_ratio, "scan") for s in cov.seed_list]
    ref = pd.DataFrame([r.model_dump() for r in extra])
    rows = []
    for name, seeds in serving.seeds.model_dump().items():
        for s in seeds:
            row = draw_stats(sessions, s, n, c, start_ratio, name)
            rows.append(
                row.model_copy(
                    update={f"pct_{m}": float(100.0 * np.mean(ref[m].to_numpy() <= getattr(row, m))) for m in METRICS}
                )
            )
    frame = pd.DataFrame([r.model_dump() for r in rows + extra])
    atomic.write_text(out_csv, frame.to_csv(index=False, lineterminator="\n"))
    summary = {
        "seconds": time.perf_counter() - t0,
        "scan_seeds": cov.seeds,
        "sessions_per_draw": n,
        "concurrency": c,
        "scan_quantiles": {m: ref[m].quantile([0.1, 0.5, 0.9]).tolist() for m in METRICS},
        "draws": [r.model_dump() for r in rows],
        "provenance": provenance.collect({"coverage": cov.model_dump(mode="json")}).model_dump(mode="json"),
    }
    atomic.write_json(out_json, summary)
    return frame
