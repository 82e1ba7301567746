"""Task names and candidate lists derived from the config."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel

from infbench.compression.submission import MANIFEST


class Task(BaseModel):
    """A CompressionBench task: a source under a storage limit (PROTOCOL A1, A7)."""

    name: str
    source: str
    limit_gib: float


def task_name(source: str, limit_gib: float) -> str:
    return f"{source}-{limit_gib:g}gib"


def tasks(config: dict) -> dict[str, Task]:
    return {task_name(t["source"], t["limit_gib"]): Task(name=task_name(t["source"], t["limit_gib"]),
                                                         source=t["source"], limit_gib=t["limit_gib"])
            for t in config["tasks"]}


def submission_dirs(submissions_dir: str | Path) -> dict[str, Path]:
    root = Path(submissions_dir)
    if not root.is_dir():
        return {}
    return {f"submission-{p.name}": p for p in sorted(root.iterdir()) if p.is_dir() and not p.name.startswith(".")}


def declared_source(package: Path) -> str | None:
    """The source a package's manifest names, or None if it cannot be read (verification records why)."""
    try:
        return str(yaml.safe_load((package / MANIFEST).read_text())["source"])
    except Exception:
        return None
