"""Content hashes of files and directories."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_hashes(directory: str | Path) -> dict[str, str]:
    """sha256 of every file under ``directory``, keyed by relative POSIX path."""
    root = Path(directory)
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
