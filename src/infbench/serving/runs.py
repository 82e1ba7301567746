"""One replay run as the pipeline does it: settings from config, a launched server, records + summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.errors import InputFileError
from infbench.hashing import sha256_file
from infbench.serving import replay, servers, workload
from infbench.serving.trace import Session
from infbench.serving.value import Deployment, Score, Targets, score


class RunSummary(BaseModel):
    server: str
    concurrency: int
    seed: int
    settings: replay.ReplaySettings
    records: str
    requests: int
    score: Score
    provenance: provenance.Provenance


def deployment(serving: dict[str, Any]) -> Deployment:
    return Deployment.model_validate(serving["deployment"])


def settings(serving: dict[str, Any], base_url: str, concurrency: int, seed: int,
             request_fields: dict[str, Any], prompt_seed: int | None = None) -> replay.ReplaySettings:
    """A replay of ``seed`` as configured; ``prompt_seed`` None: its prompts' public content seed
    (development, calibration), else the held-out one verification draws from the operator's secret."""
    r, w = serving["replay"], serving["workload"]
    low, high = w["token_id_range"]
    return replay.ReplaySettings(
        base_url=base_url, model=serving["deployment"]["name"], concurrency=concurrency, seed=seed,
        warmup_s=r["warmup_s"], window_s=r["window_s"], request_timeout_s=r["request_timeout_s"],
        idle_cap_s=r["idle_cap_s"], token_low=low, token_high=high, marker_tokens=w["marker_tokens"],
        temperature=r["temperature"], start_ratio=tuple(r["start_ratio"]), request_fields=request_fields,
        far_context=w["far_context"], prompt_seed=prompt_seed)


def launch_vars(serving: dict[str, Any], model_dir: str, gguf: str) -> servers.LaunchVars:
    return servers.LaunchVars(model_dir=model_dir, gguf=gguf, model_name=serving["deployment"]["name"],
                              threads=serving["replay"]["threads"],
                              context_limit=serving["deployment"]["context_limit"],
                              devices=serving["deployment"]["devices"])


def spec(serving: dict[str, Any], name: str) -> servers.ServerSpec:
    return servers.ServerSpec.model_validate(serving["servers"][name])


def replay_once(serving: dict[str, Any], sessions: list[Session], server: str, base_url: str, concurrency: int,
                seed: int, records_path: str, summary_path: str | None, inputs: dict[str, str],
                targets: Targets | None = None) -> RunSummary:
    st = settings(serving, base_url, concurrency, seed, spec(serving, server).request_fields)
    recs = replay.run(workload.draw(sessions, seed), st)
    frame = replay.write_records(recs, records_path)
    summary = RunSummary(
        server=server, concurrency=concurrency, seed=seed, settings=st, records=str(records_path),
        requests=len(frame), score=score_frame(frame, serving, targets),
        provenance=provenance.collect({"server": server, "concurrency": concurrency, "seed": seed,
                                       "serving": serving}, inputs))
    if summary_path:
        atomic.write_json(summary_path, summary.model_dump(mode="json"))
    return summary


def score_frame(frame: pd.DataFrame, serving: dict[str, Any], targets: Targets | None) -> Score:
    return score(frame, deployment(serving), serving["replay"]["window_s"],
                 serving["replay"]["max_context_overflow_share"], targets)


def read_records(records_path: str) -> pd.DataFrame:
    """A replay's request records, refused if an older replay client wrote them."""
    frame = pd.read_parquet(records_path)
    missing = [name for name in replay.RECORD_SCHEMA.names if name not in frame.columns]
    if missing:
        raise InputFileError(records_path, f"replay records lack {', '.join(missing)} (written by an older replay "
                                           "client); delete them and rerun the replay")
    return frame


def rescore(records_path: str, serving: dict[str, Any], targets: Targets) -> Score:
    return score_frame(read_records(records_path), serving, targets)


def input_hashes(*paths: str) -> dict[str, str]:
    return {p: sha256_file(p) for p in paths if Path(p).is_file()}
