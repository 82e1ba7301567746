"""The run record (one per agent run) and its events, versioned.

Every event has a UTC ``time``; a run record's events are sorted by time and
lie within the run's ``[start, end]``. ``docs/runs.md`` documents each field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Agent(Strict):
    model: str
    scaffold: str
    effort: str | None = None


class RunSpec(Strict):
    """``run.yaml``: who ran, on what task, with what budget, and where the final submission is."""

    schema_version: Literal[1] = SCHEMA_VERSION
    agent: Agent
    track: Literal["compression", "serving"]
    task: str
    budget_hours: float = Field(gt=0)
    start: datetime
    end: datetime
    final_submission: str

    @field_validator("start", "end")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("needs a UTC offset (e.g. 2026-01-01T12:00:00Z)")
        return value


class RewardCall(Strict):
    """One ``infbench reward`` call (PROTOCOL A4)."""

    type: Literal["reward"] = "reward"
    time: datetime
    submission: str
    content_hash: str | None
    reward: float
    f: float | None
    ppl: float | None
    ref_ppl: float | None
    s_pkg_bytes: int | None
    s_res_bytes: int | None
    failed_check: str | None
    wall_s: float


class ReplayCall(Strict):
    """One replay of a served system (PROTOCOL B4): its score on a seed at a concurrency."""

    type: Literal["replay"] = "replay"
    time: datetime
    content_hash: str
    seed: int
    concurrency: int
    D: float | None
    G: float
    f: float | None
    completed: int
    wall_s: float


class VersionPublished(Strict):
    type: Literal["version"] = "version"
    time: datetime
    version: str
    content_hash: str
    s_pkg_bytes: int
    local_metrics: dict[str, float] = {}


class CompletionDeclared(Strict):
    type: Literal["completion"] = "completion"
    time: datetime
    note: str | None = None


class LoadChange(Strict):
    type: Literal["load"] = "load"
    time: datetime
    concurrency: int = Field(ge=1)


class ToolCall(Strict):
    type: Literal["tool_call"] = "tool_call"
    time: datetime
    name: str


class TokenUsage(Strict):
    """Tokens of one model call: ``input`` uncached, ``cache_write`` written to the prompt cache,
    ``cached`` read from it, ``output`` generated (reasoning included)."""

    type: Literal["tokens"] = "tokens"
    time: datetime
    model: str
    input: int = Field(ge=0)
    cache_write: int = Field(ge=0, default=0)
    cached: int = Field(ge=0, default=0)
    output: int = Field(ge=0)


Event = Annotated[
    RewardCall | ReplayCall | VersionPublished | CompletionDeclared | LoadChange | ToolCall | TokenUsage,
    Field(discriminator="type"),
]


class RunRecord(Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    run: str
    spec: RunSpec
    events: list[Event]


class RunStatus(Strict):
    """``results/runs/ingested/<run>/status.json``: ingested or not, and why."""

    run: str
    ingested: bool
    reason: str | None = None
    agent: Agent | None = None
    track: str | None = None
    task: str | None = None
    candidate: str | None = None
    events: int = 0
