"""``versions/<id>/``: one submission directory per published version, with
``versions/<id>.json`` beside it: ``published_at`` and optional ``local_metrics``
(e.g. weight reconstruction MSE; lower is better)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from infbench.package_files import PackageFilesError, content_hash, package_bytes
from infbench.runs.jsonl import RunError, first_error
from infbench.runs.schema import VersionPublished


class VersionMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    published_at: datetime
    local_metrics: dict[str, float] = {}


def events(versions_dir: Path, *, hashes: bool = True) -> list[VersionPublished]:
    """Published versions by time; ``hashes=False`` skips hashing the packages (a cheap check)."""
    found = []
    for folder in sorted(p for p in versions_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        meta_path = versions_dir / f"{folder.name}.json"
        if not meta_path.is_file():
            raise RunError(meta_path, "missing: each version folder needs <id>.json with 'published_at'")
        try:
            meta = VersionMeta.model_validate_json(meta_path.read_text())
        except ValidationError as exc:
            raise RunError(meta_path, first_error(exc)) from None
        try:
            digest, size = (content_hash(folder), package_bytes(folder)) if hashes else ("", 0)
        except PackageFilesError as exc:  # a link out of the version folder
            raise RunError(folder, str(exc)) from None
        found.append(
            VersionPublished(
                time=meta.published_at,
                version=folder.name,
                content_hash=digest,
                s_pkg_bytes=size,
                local_metrics=meta.local_metrics,
            )
        )
    return sorted(found, key=lambda e: e.time)
