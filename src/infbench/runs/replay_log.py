"""``replay_log.jsonl``: one line per replay of a served system (docs/runs.md):
``time``, ``content_hash`` (of the server's code and configuration), ``seed``,
``concurrency``, ``D``, ``G``, ``f``, ``completed`` requests and ``wall_s``.
``infbench replay-log`` appends one from a replay summary (``append``)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ValidationError

from infbench.package_files import content_hash
from infbench.runs.jsonl import RunError, first_error, timed_events
from infbench.runs.schema import ReplayCall


def events(path: Path) -> list[ReplayCall]:
    return timed_events(path, "a replay record", lambda obj: ReplayCall.model_validate({"type": "replay", **obj}))


class _Score(BaseModel):
    D: float | None
    G: float
    f: float | None
    completed: int


class _Summary(BaseModel):
    """The fields a replay summary (``infbench.serving.replay_job.RunSummary`` JSON) contributes."""

    server: str
    concurrency: int
    seed: int
    score: _Score


def append(summary_json: str | Path, server_dir: str | Path, log_path: str | Path, wall_s: float) -> ReplayCall:
    """One replay summary as a ``replay_log.jsonl`` line, timed now, hashed by the server's directory."""
    path = Path(summary_json)
    try:
        summary = _Summary.model_validate_json(path.read_text())
    except OSError as exc:
        raise RunError(path, f"cannot read the replay summary ({exc.strerror})") from None
    except ValidationError as exc:
        raise RunError(path, f"not a replay summary: {first_error(exc)}") from None
    if not Path(server_dir).is_dir():
        raise RunError(server_dir, "the server's code and configuration directory does not exist")
    call = ReplayCall(
        time=datetime.now(UTC),
        content_hash=content_hash(server_dir),
        seed=summary.seed,
        concurrency=summary.concurrency,
        D=summary.score.D,
        G=summary.score.G,
        f=summary.score.f,
        completed=summary.score.completed,
        wall_s=wall_s,
    )
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a") as log:
        log.write(call.model_dump_json(exclude={"type"}) + "\n")
    return call
