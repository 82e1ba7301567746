"""A run directory -> a validated run record (docs/runs.md), or the reason it is not ingested."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import yaml
from pydantic import ValidationError

from infbench import atomic
from infbench.compression.submission import MANIFEST
from infbench.runs import events_log, replay_log, reward_log, transcripts, versions
from infbench.runs.jsonl import RunError, first_error
from infbench.runs.schema import RunRecord, RunSpec, RunStatus

SPEC = "run.yaml"
EVENTS_SCHEMA = pa.schema(
    [
        ("run", pa.string()),
        ("seq", pa.int64()),
        ("type", pa.string()),
        ("time", pa.timestamp("us", tz="UTC")),
        ("t_hours", pa.float64()),
        ("payload", pa.string()),
    ]
)


def read_spec(run_dir: Path) -> RunSpec:
    path = run_dir / SPEC
    if not path.is_file():
        raise RunError(path, "missing (agent, track, task, budget_hours, start, end, final_submission)")
    try:
        return RunSpec.model_validate(yaml.safe_load(path.read_text()))
    except yaml.YAMLError as exc:
        raise RunError(path, f"not YAML: {exc}") from None
    except ValidationError as exc:
        raise RunError(path, first_error(exc)) from None


def final_submission(run_dir: Path, spec: RunSpec) -> Path:
    path = (run_dir / spec.final_submission).resolve()
    if not path.is_relative_to(run_dir.resolve()):
        raise RunError(run_dir / SPEC, f"field 'final_submission': {spec.final_submission} is outside the run")
    if spec.track == "compression" and not (path / MANIFEST).is_file():
        raise RunError(run_dir / SPEC, f"field 'final_submission': no {MANIFEST} in {spec.final_submission}")
    if not path.exists():
        raise RunError(run_dir / SPEC, f"field 'final_submission': {spec.final_submission} does not exist")
    return path


def load(run_dir: str | Path, *, known_models: set[str], tasks: set[str], hashes: bool = True) -> RunRecord:
    """Every file of the run read and checked; ``hashes=False`` skips hashing version packages."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunError(run_dir, "not a run directory (it does not exist)")
    spec = read_spec(run_dir)
    if spec.agent.model not in known_models:
        raise RunError(
            run_dir / SPEC,
            f"field 'agent.model': unknown agent '{spec.agent.model}' (config "
            f"runs.prices names {', '.join(sorted(known_models))})",
        )
    if spec.track == "compression" and spec.task not in tasks:
        raise RunError(run_dir / SPEC, f"field 'task': unknown task '{spec.task}' (tasks: {', '.join(sorted(tasks))})")
    if spec.end <= spec.start:
        raise RunError(run_dir / SPEC, "field 'end' is not after 'start'")
    final_submission(run_dir, spec)
    found = []
    sources = [
        ("reward_log.jsonl", reward_log.events),
        ("replay_log.jsonl", replay_log.events),
        ("events.jsonl", events_log.events),
    ]
    for name, read in sources:
        if (run_dir / name).is_file():
            found += [(run_dir / name, e) for e in read(run_dir / name)]
    if (run_dir / "versions").is_dir():
        found += [(run_dir / "versions", e) for e in versions.events(run_dir / "versions", hashes=hashes)]
    if (run_dir / "transcripts").is_dir():
        found += [(run_dir / "transcripts", e) for e in transcripts.events(run_dir / "transcripts")]
    for path, event in found:
        if not spec.start <= event.time <= spec.end:
            raise RunError(
                path,
                f"{event.type} event at {event.time.isoformat()} is outside the run's "
                f"start..end ({spec.start.isoformat()} .. {spec.end.isoformat()})",
            )
    events = sorted((e for _, e in found), key=lambda e: e.time)
    return RunRecord(run=run_dir.name, spec=spec, events=events)


def check(run_dir: Path, *, known_models: set[str], tasks: set[str]) -> str | None:
    """The reason ``run_dir`` cannot be ingested, or None (cheap: no package hashing)."""
    try:
        load(run_dir, known_models=known_models, tasks=tasks, hashes=False)
    except RunError as exc:
        return str(exc)
    return None


def ingest(
    run_dir: str | Path,
    name: str,
    *,
    known_models: set[str],
    tasks: set[str],
    candidate: str | None,
    status_path: str,
    record_path: str,
    events_path: str,
) -> RunStatus:
    """Write the status, the record and the events table; a run that fails gets a status naming why
    (and an empty record and table), never an exception."""
    try:
        record = load(run_dir, known_models=known_models, tasks=tasks)
    except RunError as exc:
        status = RunStatus(run=name, ingested=False, reason=str(exc))
        rows = []
        atomic.write_json(record_path, {})
    else:
        record = record.model_copy(update={"run": name})
        spec = record.spec
        status = RunStatus(
            run=name,
            ingested=True,
            agent=spec.agent,
            track=spec.track,
            task=spec.task,
            candidate=candidate,
            events=len(record.events),
        )
        rows = [
            {
                "run": name,
                "seq": i,
                "type": e.type,
                "time": e.time,
                "t_hours": (e.time - spec.start).total_seconds() / 3600,
                "payload": json.dumps(e.model_dump(mode="json", exclude={"type", "time"}), sort_keys=True),
            }
            for i, e in enumerate(record.events)
        ]
        atomic.write_json(record_path, record.model_dump(mode="json"))
    atomic.write_parquet(events_path, pd.DataFrame(rows, columns=EVENTS_SCHEMA.names), EVENTS_SCHEMA)
    atomic.write_json(status_path, status.model_dump(mode="json"))
    return status
