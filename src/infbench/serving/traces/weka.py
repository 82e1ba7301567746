"""AgentX / Weka session traces, read as the tools that write them write them (PROTOCOL B4).

The format: the Weka KV-cache-tester agentic coding traces as AIPerf and the AgentX harness read them
(their ``weka_trace_models``), and infbench's own generator (:mod:`infbench.serving.synthetic`).
A trace (:class:`WekaTrace`) is one JSON object: ``id``, ``block_size``, ``requests``; optional
``models``, ``hash_id_scope`` (``local``: hash ids name blocks of this trace only; ``global``: shared
across traces), ``tool_tokens``, ``system_tokens``, ``totals``. ``requests`` interleaves API calls
(:class:`WekaRequest`: ``type`` ``n`` normal, ``s`` streaming, or ``request`` / none as infbench's
generator writes) and subagents (:class:`WekaSubagent`, ``type: subagent``) with their own ``requests``.

Files: a JSON object per file, JSON Lines of them, a JSON array of them, or a directory of such
files (``*.json``, ``*.jsonl``, in name order); trace ids are unique across all of them.

What the replay takes from a trace, by rule:

- ``in``, ``out``, ``hash_ids``, ``block_size``, ``hash_id_scope``: the prompt (``in`` tokens, the
  blocks ``hash_ids`` name) and the prescribed output. A recorded ``out`` of 0 is sent as 1 token
  (a request generates at least one; AIPerf does the same).
- Structure: a subagent is spawned by the preceding parent request and joined by the parent's next
  request; with no later parent request it runs in the background. A subagent before any parent
  request starts with its parent chain; one without requests is skipped.
- ``think_time``: the end-to-start delay after what the request waits for. ``think_time: null`` (not
  recorded) is derived from the recorded times: ``t`` minus the latest end (``t + api_time``, a
  missing ``api_time`` counted as 0) of what it waits for, at least 0.
- ``t``: the recorded start in seconds, made relative to the session's first request. A subagent's
  request recorded before the subagent's own ``t`` is taken as relative to it (older captures),
  otherwise as absolute (current captures), as AIPerf does.

Kept in the typed records, not used by the replay: ``models`` / ``model`` (the replay sends the
deployment's model name), ``tool_tokens`` and ``system_tokens`` (already inside ``in`` and
``hash_ids``), ``totals``, ``input_types``, ``output_types``, ``stop``, ``api_time`` (but above),
``ttft``, and a subagent's ``agent_id``, ``subagent_type``, ``status``, ``duration_ms``,
``total_tokens``, ``tool_use_count``. Fields the format does not define are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from infbench.errors import InputFileError
from infbench.serving.sessions import Chain, Session, TraceRequest
from infbench.serving.traces.records import expect_object, json_records, record_error

_RECORD = ConfigDict(extra="ignore", allow_inf_nan=False, populate_by_name=True)
_RELATIVE_EPS_S = 1e-6


class WekaRequest(BaseModel):
    """One API call."""

    model_config = _RECORD
    type: Literal["n", "s", "request"] = "request"
    t: float
    in_: int = Field(alias="in", ge=1)
    out: int = Field(ge=0)
    hash_ids: list[int] = Field(default_factory=list)
    think_time: float | None = Field(default=None, ge=0)
    api_time: float | None = None
    ttft: float | None = None
    model: str | None = None
    input_types: list[str] = Field(default_factory=list)
    output_types: list[str] = Field(default_factory=list)
    stop: str | None = None


class WekaSubagent(BaseModel):
    """A subagent with its own requests (and, in infbench's generator, nested subagents)."""

    model_config = _RECORD
    type: Literal["subagent"]
    requests: list[WekaEntry]
    t: float | None = None
    agent_id: str | None = None
    subagent_type: str | None = None
    status: str | None = None
    duration_ms: float | None = None
    total_tokens: int | None = None
    tool_use_count: int | None = None
    models: list[str] = Field(default_factory=list)
    tool_tokens: int = Field(default=0, ge=0)
    system_tokens: int = Field(default=0, ge=0)


def _entry_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "subagent" if kind == "subagent" else "request"


WekaEntry = Annotated[
    Annotated[WekaRequest, Tag("request")] | Annotated[WekaSubagent, Tag("subagent")], Discriminator(_entry_kind)
]
WekaSubagent.model_rebuild()


class WekaTrace(BaseModel):
    """One session."""

    model_config = _RECORD
    id: str
    block_size: int = Field(ge=1)
    requests: list[WekaEntry] = Field(min_length=1)
    models: list[str] = Field(default_factory=list)
    hash_id_scope: Literal["local", "global"] = "local"
    tool_tokens: int = Field(default=0, ge=0)
    system_tokens: int = Field(default=0, ge=0)
    totals: dict[str, Any] | None = None


class _Builder:
    """The chains and requests of one trace, in absolute recorded time."""

    def __init__(self):
        self.requests: list[tuple[str, str, float, WekaRequest, list[str]]] = []  # id, chain, t, entry, deps
        self.ends: dict[str, float] = {}
        self.chains: dict[str, dict[str, Any]] = {}

    def walk(
        self,
        entries: list[WekaRequest | WekaSubagent],
        chain_id: str,
        kind: str,
        spawner: str | None,
        base_t: float | None,
    ) -> str | None:
        """Add one chain and the subagents nested in it; return its last request id."""
        ids: list[str] = []
        unjoined: list[str] = []  # subagent chains spawned since the last request, not yet joined
        n_sub = 0
        for entry in entries:
            prev = ids[-1] if ids else spawner
            if isinstance(entry, WekaSubagent):
                sub_id = f"{chain_id}.s{n_sub}"
                n_sub += 1
                sub_t = None if entry.t is None else _absolute(entry.t, base_t)
                if self.walk(entry.requests, sub_id, "subagent", prev, sub_t) is not None:
                    unjoined.append(sub_id)
                continue
            rid = f"{chain_id}/{len(ids)}"
            deps = [prev] if prev is not None else []
            for sub in unjoined:
                deps.append(self.chains[sub]["requests"][-1])
                self.chains[sub]["joined_by"] = rid
            unjoined = []
            t = _absolute(entry.t, base_t)
            self.requests.append((rid, chain_id, t, entry, deps))
            self.ends[rid] = t + max(entry.api_time or 0.0, 0.0)
            ids.append(rid)
        if ids:  # subagents left in ``unjoined`` have no later parent request: they run in the background
            self.chains[chain_id] = {"id": chain_id, "kind": kind, "spawned_by": spawner, "requests": ids}
        return ids[-1] if ids else None

    def delay(self, entry: WekaRequest, t: float, deps: list[str]) -> float:
        if not deps:
            return 0.0
        if entry.think_time is not None:
            return entry.think_time
        return max(0.0, t - max(self.ends[d] for d in deps))


def _absolute(t: float, base_t: float | None) -> float:
    return base_t + t if base_t is not None and t + _RELATIVE_EPS_S < base_t else t


def to_session(trace: WekaTrace) -> Session:
    b = _Builder()
    b.walk(trace.requests, "main", "main", None, None)
    t0 = min(t for _, _, t, _, _ in b.requests)
    requests = [
        TraceRequest(
            id=rid,
            chain=chain,
            t=t - t0,
            input_tokens=e.in_,
            output_tokens=max(1, e.out),
            hash_ids=e.hash_ids,
            depends_on=deps,
            delay_s=b.delay(e, t, deps),
        )
        for rid, chain, t, e, deps in b.requests
    ]
    chains = sorted((Chain(**c) for c in b.chains.values()), key=lambda c: (c.kind != "main", c.id))
    return Session(
        id=trace.id,
        block_size=trace.block_size,
        prefix_scope="session" if trace.hash_id_scope == "local" else "global",
        chains=chains,
        requests=requests,
    )


def session(raw: dict[str, Any]) -> Session:
    """One Weka trace object as a :class:`Session` (raises ValueError / ValidationError)."""
    return to_session(WekaTrace.model_validate(raw))


def trace_files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.json`` / ``*.jsonl`` files of a directory in name order."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".json", ".jsonl"))
        if not files:
            raise InputFileError(path, "a trace directory without .json or .jsonl files")
        return files
    if not path.is_file():
        raise InputFileError(path, "no such trace file or directory")
    return [path]


def read(path: str | Path) -> list[Session]:
    """Every trace of a file or directory; errors name the file, line and field."""
    sessions: list[Session] = []
    first_seen: dict[str, str] = {}
    for file in trace_files(Path(path)):
        for where, obj in json_records(file):
            try:
                s = session(expect_object(file, where, obj))
            except ValueError as exc:
                raise record_error(file, where, exc) from None
            if s.id in first_seen:
                raise InputFileError(file, f"{where}: duplicate trace id {s.id!r} (first at {first_seen[s.id]})")
            first_seen[s.id] = f"{file}: {where}"
            sessions.append(s)
    return sessions
