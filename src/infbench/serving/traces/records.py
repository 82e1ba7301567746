"""The records of a JSON trace file, each with where it is (for errors naming file, line and field).

A file holds one JSON document (an object: one record; an array: one record per element) or JSON
Lines (one object per line; blank lines skipped). A pretty-printed document is told from JSON Lines by
parsing the whole file first; a file that is neither is reported at the line where it breaks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from infbench.errors import InputFileError


def json_records(path: Path) -> Iterator[tuple[str, Any]]:
    """(``line N`` or ``record N``, parsed value) for every record of ``path``."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(path, f"unreadable: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        first = text.lstrip().split("\n", 1)[0].strip()
        if exc.msg != "Extra data" and first in ("{", "["):  # a broken pretty-printed document
            raise InputFileError(path, f"line {exc.lineno}: malformed JSON: {exc.msg}") from None
        yield from _json_lines(path, text)
        return
    if isinstance(data, list):
        for i, obj in enumerate(data, start=1):
            yield f"record {i}", obj
    else:
        yield "line 1", data


def _json_lines(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {lineno}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputFileError(path, f"line {lineno}: malformed JSON (truncated line?): {exc.msg}") from None


def record_error(path: Path, where: str, exc: Exception) -> InputFileError:
    """A validation error as ``path: line N: field.path: message`` (every failing field)."""
    if isinstance(exc, ValidationError):
        msg = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'record'}: {e['msg']}" for e in exc.errors())
    else:
        msg = str(exc)
    return InputFileError(path, f"{where}: {msg}")


def expect_object(path: Path, where: str, obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InputFileError(path, f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj
