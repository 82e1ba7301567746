"""``events.jsonl``: what the agent declared or did besides evaluating: completion
declarations, load (concurrency) changes, tool calls."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Union

from pydantic import Field, TypeAdapter, ValidationError

from infbench.runs.jsonl import RunError, check_order, first_error, objects
from infbench.runs.schema import CompletionDeclared, LoadChange, ToolCall

_Line = TypeAdapter(Annotated[Union[CompletionDeclared, LoadChange, ToolCall], Field(discriminator="type")])


def events(path: Path) -> list[CompletionDeclared | LoadChange | ToolCall]:
    found, times = [], []
    for line, obj in objects(path):
        try:
            event = _Line.validate_python(obj)
        except ValidationError as exc:
            raise RunError(path, f"not an event (type completion, load or tool_call): {first_error(exc)}", line) from None
        found.append(event)
        times.append((line, event.time))
    check_order(path, times)
    return found
