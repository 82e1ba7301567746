"""Typed coding-session traces (PROTOCOL B4) and their readers.

A :class:`Session` is a tree of request chains: the main chain and subagent
chains. Every request names the requests it waits for (``depends_on``) and the
recorded end-to-start delay after the last of them completes (``delay_s``).
Equal ``hash_ids`` within one prefix scope mean identical token blocks.

Readers:

- AgentX / Weka (``read_weka``): one JSON trace per line (or one JSON array or
  object per file) with ``id``, ``block_size`` and ``requests``; a request has
  ``t``, ``in``, ``out``, ``hash_ids``, ``think_time``; a ``type: subagent``
  entry nests its own ``requests``. A subagent is spawned by the preceding
  parent request and joined by the next parent request; with no following parent
  request it runs in the background.
- Mooncake JSONL (``read_mooncake``): ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids``. Mooncake has no session structure: each line
  is a one-request session, and hash ids are global (one prefix scope per file).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from infbench.errors import InputFileError


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
    def _check(self) -> "Session":
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
                raise ValueError(f"session {self.id}: request {r.id} has {len(r.hash_ids)} hash ids for "
                                 f"{r.input_tokens} input tokens in blocks of {self.block_size}")
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


# --- AgentX / Weka -----------------------------------------------------------------

class _WekaRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["request"] = "request"
    t: float = Field(ge=0)
    in_: int = Field(alias="in", ge=1)
    out: int = Field(ge=1)
    hash_ids: list[int]
    think_time: float = Field(default=0.0, ge=0)
    stop: str | None = None
    api_time: float | None = None


class _WekaSubagent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["subagent"]
    id: str | None = None
    requests: list[dict[str, Any]] = Field(min_length=1)


class _WekaTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    block_size: int = Field(ge=1)
    requests: list[dict[str, Any]] = Field(min_length=1)


def _weka_entry(raw: dict[str, Any]) -> _WekaRequest | _WekaSubagent:
    if raw.get("type") == "subagent":
        return _WekaSubagent.model_validate(raw)
    return _WekaRequest.model_validate(raw)


def session_from_weka(raw: dict[str, Any]) -> Session:
    """One Weka trace object as a :class:`Session` (raises ValueError / ValidationError)."""
    trace = _WekaTrace.model_validate(raw)
    chains: list[Chain] = []
    requests: list[TraceRequest] = []
    t0 = _min_t(trace.requests)

    def walk(entries: list[dict[str, Any]], chain_id: str, kind: str, spawned_by: str | None,
             first_deps: list[str]) -> str | None:
        """Add one chain and the subagents nested in it; return its last request id."""
        ids: list[str] = []
        prev: str | None = None
        unjoined: list[str] = []  # subagent chains spawned since ``prev``, not yet joined
        n_sub = 0
        for raw_entry in entries:
            entry = _weka_entry(raw_entry)
            if isinstance(entry, _WekaSubagent):
                sub_id = f"{chain_id}.s{n_sub}"
                n_sub += 1
                spawner = prev if prev is not None else spawned_by
                deps = [spawner] if spawner is not None else list(first_deps)
                last = walk(entry.requests, sub_id, "subagent", spawner, deps)
                if last is not None:
                    unjoined.append(sub_id)
                continue
            rid = f"{chain_id}/{len(ids)}"
            deps = ([prev] if prev is not None else list(first_deps))
            for i, c in enumerate(chains):
                if c.id in unjoined:
                    deps.append(c.requests[-1])
                    chains[i] = c.model_copy(update={"joined_by": rid})
            unjoined = []
            requests.append(TraceRequest(
                id=rid, chain=chain_id, t=entry.t - t0, input_tokens=entry.in_, output_tokens=entry.out,
                hash_ids=entry.hash_ids, depends_on=deps, delay_s=entry.think_time if (prev or first_deps) else 0.0,
            ))
            ids.append(rid)
            prev = rid
        # Subagents left in ``unjoined`` have no later parent request: they run in the background.
        chains.append(Chain(id=chain_id, kind=kind, spawned_by=spawned_by, requests=ids))
        return prev

    walk(trace.requests, "main", "main", None, [])
    chains.sort(key=lambda c: (c.kind != "main", c.id))
    return Session(id=trace.id, block_size=trace.block_size, chains=chains, requests=requests)


def _min_t(entries: list[dict[str, Any]]) -> float:
    ts = []
    for e in entries:
        if e.get("type") == "subagent":
            ts.append(_min_t(e.get("requests") or [{"t": math.inf}]))
        elif isinstance(e.get("t"), (int, float)):
            ts.append(float(e["t"]))
    return min(ts, default=0.0)


def _json_records(path: Path) -> Iterable[tuple[int, Any]]:
    """(line number, parsed object) for a JSONL file, or for a JSON array / object file."""
    text = path.read_text()
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"line {exc.lineno}: malformed JSON: {exc.msg}") from None
        for i, obj in enumerate(data):
            yield i + 1, obj
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"line {lineno}: malformed JSON: {exc.msg}") from None


def _error(path: Path, lineno: int, exc: Exception) -> InputFileError:
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors()]
        msg = "; ".join(parts)
    else:
        msg = str(exc)
    return InputFileError(path, f"line {lineno}: {msg}")


def read_weka(path: str | Path) -> list[Session]:
    path = Path(path)
    sessions = []
    for lineno, obj in _json_records(path):
        if not isinstance(obj, dict):
            raise InputFileError(path, f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
        try:
            sessions.append(session_from_weka(obj))
        except (ValueError, ValidationError) as exc:
            raise _error(path, lineno, exc) from None
    _check_unique(path, sessions)
    return sessions


class _MooncakeLine(BaseModel):
    model_config = ConfigDict(extra="forbid")
    timestamp: float = Field(ge=0)
    input_length: int = Field(ge=1)
    output_length: int = Field(ge=1)
    hash_ids: list[int]


def read_mooncake(path: str | Path, block_size: int = 512) -> list[Session]:
    path = Path(path)
    sessions = []
    for lineno, obj in _json_records(path):
        try:
            line = _MooncakeLine.model_validate(obj)
            sid = f"{path.stem}:{lineno}"
            req = TraceRequest(id="main/0", chain="main", t=line.timestamp / 1000.0,
                               input_tokens=line.input_length, output_tokens=line.output_length,
                               hash_ids=line.hash_ids, delay_s=0.0)
            sessions.append(Session(id=sid, block_size=block_size, prefix_scope="global",
                                    chains=[Chain(id="main", kind="main", requests=["main/0"])],
                                    requests=[req]))
        except (ValueError, ValidationError) as exc:
            raise _error(path, lineno, exc) from None
    return sessions


def _check_unique(path: Path, sessions: list[Session]) -> None:
    seen: set[str] = set()
    for s in sessions:
        if s.id in seen:
            raise InputFileError(path, f"duplicate trace id {s.id!r}")
        seen.add(s.id)


def read_trace(path: str | Path, fmt: str, block_size: int = 512) -> list[Session]:
    if fmt == "weka":
        return read_weka(path)
    if fmt == "mooncake":
        return read_mooncake(path, block_size)
    raise ValueError(f"unknown trace format {fmt!r} (weka, mooncake)")

