"""``events.jsonl``: what the agent declared or did besides evaluating: completion
declarations, load (concurrency) changes, tool calls."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, TypeAdapter

from infbench.runs.jsonl import timed_events
from infbench.runs.schema import CompletionDeclared, LoadChange, ToolCall

_Line = TypeAdapter(Annotated[CompletionDeclared | LoadChange | ToolCall, Field(discriminator="type")])


def events(path: Path) -> list[CompletionDeclared | LoadChange | ToolCall]:
    return timed_events(path, "an event (type completion, load or tool_call)", _Line.validate_python)
