"""Trace readers, one module per format, each with typed records of the format as its writers write it.

- ``weka`` (:mod:`.weka`): AgentX / Weka session traces: a file or a directory of session files.
- ``mooncake`` (:mod:`.mooncake`): Mooncake JSONL, the single-request original and the multi-turn
  variant of AIPerf / the AgentX harness's generator.

Every reader returns :class:`infbench.serving.sessions.Session` objects; a malformed trace raises an
:class:`~infbench.errors.InputFileError` naming the file, line and field.
"""

from __future__ import annotations

from pathlib import Path

from infbench.errors import InputFileError
from infbench.serving.sessions import Session
from infbench.serving.traces import mooncake, weka
from infbench.serving.traces.records import json_records

FORMATS = ("weka", "mooncake")


def read_trace(path: str | Path, fmt: str, block_size: int = 512) -> list[Session]:
    """``block_size``: Mooncake's (its rows do not say it); Weka traces carry their own."""
    if fmt == "weka":
        return weka.read(path)
    if fmt == "mooncake":
        return mooncake.read(path, block_size)
    raise ValueError(f"unknown trace format {fmt!r} ({', '.join(FORMATS)})")


def detect(path: str | Path) -> str:
    """The format of a trace from its first record: ``requests`` is Weka, ``input_length`` Mooncake."""
    path = Path(path)
    first_file = weka.trace_files(path)[0]
    for where, obj in json_records(first_file):
        if isinstance(obj, dict) and "requests" in obj:
            return "weka"
        if isinstance(obj, dict) and ("input_length" in obj or "output_length" in obj):
            return "mooncake"
        raise InputFileError(
            first_file,
            f"{where}: neither a Weka trace (no 'requests') nor a Mooncake row (no 'input_length'); give the format",
        )
    raise InputFileError(first_file, "no records")
