"""``replay_log.jsonl``: one line per replay of a served system (docs/runs.md):
``time``, ``content_hash`` (of the server's code and configuration), ``seed``,
``concurrency``, ``D``, ``G``, ``f``, ``completed`` requests and ``wall_s``."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from infbench.runs.jsonl import RunError, check_order, first_error, objects
from infbench.runs.schema import ReplayCall


def events(path: Path) -> list[ReplayCall]:
    calls, times = [], []
    for line, obj in objects(path):
        try:
            call = ReplayCall.model_validate({"type": "replay", **obj})
        except ValidationError as exc:
            raise RunError(path, f"not a replay record: {first_error(exc)}", line) from None
        calls.append(call)
        times.append((line, call.time))
    check_order(path, times)
    return calls
