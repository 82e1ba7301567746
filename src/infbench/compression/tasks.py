"""CompressionBench tasks: a source under a storage limit (PROTOCOL A1, A7), named from the config."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel

from infbench.config.model import TaskSpec


class Task(BaseModel):
    """A CompressionBench task: a source under a storage limit (PROTOCOL A1, A7)."""

    name: str
    source: str
    limit_gib: float


def task_name(source: str, limit_gib: float) -> str:
    return f"{source}-{limit_gib:g}gib"


def tasks(specs: Iterable[TaskSpec]) -> dict[str, Task]:
    """The configured tasks by name."""
    return {
        task_name(t.source, t.limit_gib): Task(
            name=task_name(t.source, t.limit_gib), source=t.source, limit_gib=t.limit_gib
        )
        for t in specs
    }
