"""Reading a run's JSONL logs: every bad line is an error naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from pydantic import ValidationError

from infbench.errors import InputFileError

Event = TypeVar("Event")


class RunError(InputFileError):
    """A run directory cannot be ingested; the message names the file (and line) to fix."""

    def __init__(self, path, message: str, line: int | None = None):
        super().__init__(f"{path}:{line}" if line is not None else path, message)


def objects(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-empty line of ``path``."""
    with open(path) as fh:
        for number, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                what = "truncated line" if not text.endswith("\n") else "not JSON"
                raise RunError(path, f"{what} ({exc.msg}, column {exc.colno})", number) from None
            if not isinstance(value, dict):
                raise RunError(path, "a line must be a JSON object", number)
            yield number, value


def check_order(path: Path, times: list[tuple[int, datetime]]) -> None:
    """A log is appended as things happen: its times never go backwards."""
    for (_, before), (line, after) in zip(times, times[1:]):
        if after < before:
            raise RunError(
                path,
                f"event out of order: {after.isoformat()} is before the previous line's {before.isoformat()}",
                line,
            )


def first_error(exc) -> str:
    """A pydantic ValidationError's first error as "field 'a.b': message"."""
    err = exc.errors()[0]
    return f"field '{'.'.join(map(str, err['loc']))}': {err['msg']}"


def timed_events(path: Path, what: str, parse: Callable[[dict], Event]) -> list[Event]:
    """``parse`` of every line (an object with a ``time``), in order. A line ``parse`` rejects with a
    ValidationError is "not <what>"; with another ValueError, its message; both name the line."""
    found, times = [], []
    for line, obj in objects(path):
        try:
            event = parse(obj)
        except ValidationError as exc:
            raise RunError(path, f"not {what}: {first_error(exc)}", line) from None
        except ValueError as exc:
            raise RunError(path, str(exc), line) from None
        found.append(event)
        times.append((line, event.time))
    check_order(path, times)
    return found
