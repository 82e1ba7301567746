"""Typed coding-session traces (PROTOCOL B4).

A :class:`Session` is a tree of request chains: the main chain and subagent
chains. Every request names the requests it waits for (``depends_on``) and the
recorded end-to-start delay after the last of them completes (``delay_s``).
Equal ``hash_ids`` within one prefix scope mean identical token blocks.

The readers of the trace formats (AgentX / Weka, Mooncake) are in
:mod:`infbench.serving.traces`, one module per format.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TraceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    chain: str
    t: float = Field(ge=0, description="recorded start, seconds from session start")
    input_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    hash_ids: list[int]
    depends_on: list[str] = Field(default_factory=list)
    delay_s: float = Field(ge=0, description="recorded gap after the last dependency completes")


class Chain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: Literal["main", "subagent"]
    spawned_by: str | None = None
    joined_by: str | None = None
    requests: list[str]

    @property
    def background(self) -> bool:
        return self.kind == "subagent" and self.joined_by is None


class Session(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    block_size: int = Field(ge=1)
    prefix_scope: Literal["session", "global"] = "session"
    chains: list[Chain]
    requests: list[TraceRequest]

    @model_validator(mode="after")
    def _check(self) -> Session:
        ids = [r.id for r in self.requests]
        if len(set(ids)) != len(ids):
            raise ValueError(f"session {self.id}: duplicate request ids")
        known = set(ids)
        chain_ids = {c.id for c in self.chains}
        for r in self.requests:
            if r.chain not in chain_ids:
                raise ValueError(f"session {self.id}: request {r.id} names unknown chain {r.chain}")
            for dep in r.depends_on:
                if dep not in known:
                    raise ValueError(f"session {self.id}: request {r.id} depends on unknown request {dep}")
            if len(r.hash_ids) > math.ceil(r.input_tokens / self.block_size):
                raise ValueError(
                    f"session {self.id}: request {r.id} has {len(r.hash_ids)} hash ids for "
                    f"{r.input_tokens} input tokens in blocks of {self.block_size}"
                )
        for c in self.chains:
            for ref in (c.spawned_by, c.joined_by, *c.requests):
                if ref is not None and ref not in known:
                    raise ValueError(f"session {self.id}: chain {c.id} names unknown request {ref}")
        if sum(c.kind == "main" for c in self.chains) != 1:
            raise ValueError(f"session {self.id}: needs exactly one main chain")
        self.topological_order()
        return self

    def topological_order(self) -> list[TraceRequest]:
        """Requests in dependency order (stable: trace order among ready ones); raises on a cycle."""
        by_id = {r.id: r for r in self.requests}
        pending = {r.id: set(r.depends_on) for r in self.requests}
        order: list[TraceRequest] = []
        while pending:
            ready = [rid for rid in by_id if rid in pending and not pending[rid]]
            if not ready:
                raise ValueError(f"session {self.id}: dependency cycle among {sorted(pending)}")
            for rid in ready:
                del pending[rid]
                order.append(by_id[rid])
            for deps in pending.values():
                deps.difference_update(ready)
        return order

    @property
    def max_context(self) -> int:
        """The longest request: prompt plus prescribed output."""
        return max(r.input_tokens + r.output_tokens for r in self.requests)

    @property
    def total_input_tokens(self) -> int:
        return sum(r.input_tokens for r in self.requests)

    @property
    def main_chain(self) -> Chain:
        return next(c for c in self.chains if c.kind == "main")

    @property
    def n_subagents(self) -> int:
        return sum(c.kind == "subagent" for c in self.chains)
