"""One replay as the pipeline runs it: its request records and summary, scored under the configured
deployment; reading records back and scoring them again under other targets."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.config.model import ServingCore
from infbench.errors import InputFileError
from infbench.hashing import sha256_file
from infbench.serving import replay, replay_settings, request_records, workload
from infbench.serving.sessions import Session
from infbench.serving.value import Score, Targets, score


class RunSummary(BaseModel):
    server: str
    concurrency: int
    seed: int
    settings: replay_settings.ReplaySettings
    records: str
    requests: int
    score: Score
    provenance: provenance.Provenance


def replay_once(
    serving: ServingCore,
    sessions: list[Session],
    server: str,
    base_url: str,
    concurrency: int,
    seed: int,
    records_path: str,
    summary_path: str | None,
    inputs: dict[str, str],
    targets: Targets | None = None,
) -> RunSummary:
    st = replay_settings.ReplaySettings.for_serving(
        serving, base_url, concurrency, seed, serving.servers[server].request_fields
    )
    recs = replay.run(workload.draw(sessions, seed), st)
    frame = request_records.write_records(recs, records_path)
    summary = RunSummary(
        server=server,
        concurrency=concurrency,
        seed=seed,
        settings=st,
        records=str(records_path),
        requests=len(frame),
        score=score_frame(frame, serving, targets),
        provenance=provenance.collect(
            {"server": server, "concurrency": concurrency, "seed": seed, "serving": serving.model_dump(mode="json")},
            inputs,
        ),
    )
    if summary_path:
        atomic.write_json(summary_path, summary.model_dump(mode="json"))
    return summary


def score_frame(frame: pd.DataFrame, serving: ServingCore, targets: Targets | None) -> Score:
    return score(frame, serving.deployment, serving.replay.window_s, serving.replay.max_context_overflow_share, targets)


def read_records(records_path: str) -> pd.DataFrame:
    """A replay's request records, refused if an older replay client wrote them."""
    frame = pd.read_parquet(records_path)
    missing = [name for name in request_records.RECORD_SCHEMA.names if name not in frame.columns]
    if missing:
        raise InputFileError(
            records_path,
            f"replay records lack {', '.join(missing)} (written by an older replay "
            "client); delete them and rerun the replay",
        )
    return frame


def rescore(records_path: str, serving: ServingCore, targets: Targets) -> Score:
    return score_frame(read_records(records_path), serving, targets)


def input_hashes(*paths: str) -> dict[str, str]:
    return {p: sha256_file(p) for p in paths if Path(p).is_file()}
