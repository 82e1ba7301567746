"""Mooncake JSONL traces, read as the tools that write them write them (PROTOCOL B4).

Two variants, told apart per row by ``session_id``:

- The original (Mooncake, FAST'25): every row one request, ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids`` (blocks of ``block_size`` tokens, 512 in Mooncake's traces). A row
  without ``session_id`` is a one-request session.
- Multi-turn, as AIPerf's Mooncake loader reads it and the AgentX harness's generator
  (``aiperf synthesize agentic-code``) writes it: rows sharing a ``session_id`` are the turns of one
  session, in file order. Turn 0 has ``timestamp`` (and the generator's ``group_id``); later turns
  have ``delay``, milliseconds after the previous turn's response. ``input_length`` and ``hash_ids``
  of a later turn are the turn's *new* tokens: the prompt of turn ``k`` is the prompt of turn ``k-1``,
  its output and the new tokens (AIPerf sends the conversation so far, responses included).

What the replay takes, by rule:

- A turn's prompt is ``L_k = L_{k-1} + output_{k-1} + input_length_k`` tokens (``L_0`` = turn 0's
  ``input_length``). Its blocks are the previous turn's blocks (the previous prompt, shared exactly)
  followed by new blocks of its own; so the hash ids turn 0 names (shared across the file: hash ids
  are global in Mooncake) start every turn, and a later turn's own ``hash_ids`` (its new content,
  which in the replay follows the previous prompt and response) are checked but not needed. Blocks
  a row does not name are new blocks, unique to the session.
- ``delay`` (ms, >= 0) is the end-to-start delay of a later turn (absent: 0); a first turn's
  ``delay``, if given, is waited before it. The recorded start ``t`` of a turn is the sum of the
  delays before it (response times are not in the trace).
- ``timestamp`` (ms, >= 0) is when a session arrived in the recorded open-loop run; the closed-loop
  replay starts a session when a lane is free, so it is checked and not used. ``group_id``,
  ``extra`` and fields the format does not define are ignored.
- Rows given as text (``text_input``, ``messages``, ``payload``) carry no token counts to
  reconstruct token-id prompts from and are refused, naming the row.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from infbench.errors import InputFileError
from infbench.serving.sessions import Chain, Session, TraceRequest
from infbench.serving.traces.records import expect_object, json_records, record_error

TEXT_FIELDS = ("text_input", "messages", "payload")


class MooncakeRow(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)
    input_length: int = Field(ge=1)
    output_length: int = Field(ge=1)
    hash_ids: list[int] = Field(default_factory=list)
    timestamp: float | None = Field(default=None, ge=0)
    delay: float | None = Field(default=None, ge=0, description="ms after the previous turn's response")
    session_id: str | None = None
    group_id: int | str | None = None


def rows(path: Path) -> Iterator[tuple[str, MooncakeRow]]:
    """(line, typed row) for every row of ``path``."""
    for where, obj in json_records(path):
        obj = expect_object(path, where, obj)
        text = [f for f in TEXT_FIELDS if f in obj]
        if "input_length" not in obj and text:
            raise InputFileError(
                path,
                f"{where}: input_length: required; a row given as {text[0]} carries text, "
                "not the token counts a token-id prompt is rebuilt from",
            )
        try:
            yield where, MooncakeRow.model_validate(obj)
        except ValueError as exc:
            raise record_error(path, where, exc) from None


def _sessions_of(path: Path) -> dict[str, list[tuple[str, MooncakeRow]]]:
    grouped: dict[str, list[tuple[str, MooncakeRow]]] = {}
    for where, row in rows(path):
        sid = row.session_id if row.session_id is not None else f"{path.stem}:{where.split()[-1]}"
        if row.session_id is None and sid in grouped:
            raise InputFileError(path, f"{where}: row id {sid!r} collides with a session_id")
        grouped.setdefault(sid, []).append((where, row))
    return grouped


class _FreshBlocks:
    """Hash ids for blocks no row names: above every id of the file, so never equal to a named block."""

    def __init__(self, first: int):
        self.next = first

    def take(self, n: int) -> list[int]:
        ids = list(range(self.next, self.next + n))
        self.next += n
        return ids


def _session(
    sid: str, turns: list[tuple[str, MooncakeRow]], block_size: int, fresh: _FreshBlocks, path: Path
) -> Session:
    requests: list[TraceRequest] = []
    ids: list[int] = []
    length, t = 0, 0.0
    for k, (where, row) in enumerate(turns):
        if k == 0:
            length = row.input_length
            named = row.hash_ids
        else:
            prev = turns[k - 1][1]
            length = length + prev.output_length + row.input_length
            named = ids
        blocks = math.ceil(length / block_size)
        if k == 0 and len(named) > blocks:
            raise InputFileError(
                path,
                f"{where}: hash_ids: {len(named)} blocks for input_length {row.input_length} in blocks of {block_size}",
            )
        ids = list(named) + fresh.take(blocks - len(named))
        delay_s = (row.delay or 0.0) / 1000.0
        t += delay_s
        requests.append(
            TraceRequest(
                id=f"main/{k}",
                chain="main",
                t=t,
                input_tokens=length,
                output_tokens=row.output_length,
                hash_ids=ids,
                depends_on=[f"main/{k - 1}"] if k else [],
                delay_s=delay_s,
            )
        )
    return Session(
        id=sid,
        block_size=block_size,
        prefix_scope="global",
        chains=[Chain(id="main", kind="main", requests=[r.id for r in requests])],
        requests=requests,
    )


def read(path: str | Path, block_size: int = 512) -> list[Session]:
    """Every session of a Mooncake JSONL file; errors name the file, line and field."""
    path = Path(path)
    if not path.is_file():
        raise InputFileError(path, "no such trace file")
    grouped = _sessions_of(path)
    if not grouped:
        raise InputFileError(path, "no rows")
    top = max((h for turns in grouped.values() for _, row in turns for h in row.hash_ids), default=-1)
    fresh = _FreshBlocks(top + 1)
    return [_session(sid, turns, block_size, fresh, path) for sid, turns in grouped.items()]
