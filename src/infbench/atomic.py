"""Atomic outputs: write to a temporary sibling, rename into place on success.

A crash or an exception never leaves a complete-looking file or directory at
the final path; the temporary is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _tmp_sibling(path: Path, directory: bool) -> Path:
    """A fresh temporary next to ``path``, with the permissions a plain create would give."""
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}.tmp-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=path.parent))
        tmp.chmod(0o777 & ~_umask())
        return tmp
    fd, name = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    os.close(fd)
    os.chmod(name, 0o666 & ~_umask())
    return Path(name)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path; on success move it to ``path`` (replacing it)."""
    final = Path(path)
    tmp = _tmp_sibling(final, directory)
    try:
        yield tmp
        if directory:
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        else:
            os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_parquet(path: str | os.PathLike, frame, schema) -> None:
    """``frame`` (pandas) as parquet with the pyarrow ``schema`` the file boundary declares."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pandas(frame, schema=schema, preserve_index=False), tmp)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
