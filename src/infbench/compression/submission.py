"""CompressionBench submission packages (see docs/submission.md).

A submission is a directory with ``manifest.yaml``, the weights, the tokenizer
and (runtime ``python``) the inference code. Everything in it counts toward
``S_pkg``, hidden files and ``__pycache__/`` included; a link out of the
package is rejected. It is only ever loaded in a separate worker process
(:mod:`infbench.compression.worker`), never imported by the pipeline.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from infbench.errors import InfbenchError
from infbench.hashing import sha256_file

MANIFEST = "manifest.yaml"
GIB = 2**30


class SubmissionError(InfbenchError):
    """A submission package is malformed; the message names the file and field."""


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    source: str
    runtime: Literal["hf", "llama.cpp", "python"]
    weights: str
    tokenizer: str
    entrypoint: str | None = None
    preload: list[str] = []  # runtime python: modules imported before the package, in the baseline worker too
    description: str = ""


def _inside(root: Path, rel: str, field: str, manifest_path: Path) -> Path:
    path = (root / rel).resolve()
    if root.resolve() not in path.parents and path != root.resolve():
        raise SubmissionError(f"{manifest_path}: field '{field}' points outside the package ({rel})")
    if not path.exists():
        raise SubmissionError(f"{manifest_path}: field '{field}': {rel} does not exist in the package")
    return path


def load_manifest(package: str | Path) -> Manifest:
    root = Path(package)
    path = root / MANIFEST
    if not path.is_file():
        raise SubmissionError(f"{path}: manifest missing (every submission needs {MANIFEST})")
    try:
        data = yaml.safe_load(path.read_text())
        manifest = Manifest.model_validate(data)
    except yaml.YAMLError as exc:
        raise SubmissionError(f"{path}: not valid YAML ({exc})") from exc
    except ValidationError as exc:
        fields = "; ".join(f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors())
        raise SubmissionError(f"{path}: {fields}") from exc
    _inside(root, manifest.weights, "weights", path)
    _inside(root, manifest.tokenizer, "tokenizer", path)
    if manifest.runtime == "python":
        if not manifest.entrypoint or ":" not in manifest.entrypoint:
            raise SubmissionError(f"{path}: field 'entrypoint': runtime python needs 'file.py:factory'")
        _inside(root, manifest.entrypoint.split(":")[0], "entrypoint", path)
    return manifest


@dataclass(frozen=True)
class PackageEntry:
    """One name in a package: a regular file (``link`` None) or a symlink to a path inside the package."""

    path: Path
    size: int  # bytes it holds on disk (a symlink: the length of its target path)
    inode: tuple[int, int] | None  # (st_dev, st_ino) of a regular file; hard links share it
    link: str | None = None


def _reject(path: Path, why: str) -> SubmissionError:
    return SubmissionError(f"{path}: {why}; a package must hold its own bytes")


def package_entries(package: str | Path) -> list[PackageEntry]:
    """Every name under the package, hidden files and ``__pycache__/`` included, in path order.

    A symlink is followed only to check where it points: one that leaves the
    package is rejected, as is a hard link whose inode also has a name outside
    the package (``st_nlink`` above the names found inside), any special file
    (FIFO, socket, device) and a package directory that is itself a symlink
    (its target's files are not the submitter's), each with a
    :class:`SubmissionError` naming the file.
    """
    if os.path.islink(package):
        raise _reject(Path(package), f"the directory itself is a symlink to {os.readlink(package)}")
    root = Path(package).resolve()
    entries, names_inside, links = [], {}, {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                target = os.readlink(path)
                real = Path(os.path.realpath(path))
                if real != root and root not in real.parents:
                    raise _reject(path, f"symlink to {target} points outside the package")
                entries.append(PackageEntry(path, st.st_size, None, target))
            elif stat.S_ISREG(st.st_mode):
                inode = (st.st_dev, st.st_ino)
                names_inside[inode] = names_inside.get(inode, 0) + 1
                links[inode] = st.st_nlink
                entries.append(PackageEntry(path, st.st_size, inode))
            elif not stat.S_ISDIR(st.st_mode):
                raise _reject(path, f"not a regular file, directory or symlink (mode {stat.filemode(st.st_mode)})")
    for e in entries:
        if e.inode is not None and links[e.inode] > names_inside[e.inode]:
            raise _reject(
                e.path, f"hard link with {links[e.inode]} names, {names_inside[e.inode]} of them in the package"
            )
    return sorted(entries, key=lambda e: e.path.relative_to(root).as_posix())


def package_bytes(package: str | Path) -> int:
    """``S_pkg``: every byte of the package (weights, code, tokenizer, manifest, caches, hidden files),
    a file with several names inside the package counted once."""
    entries = package_entries(package)
    files = {e.inode: e.size for e in entries if e.inode is not None}
    return sum(files.values()) + sum(e.size for e in entries if e.link is not None)


def content_hash(package: str | Path) -> str:
    """sha256 over every name's relative path and content hash (a symlink: its target), the names
    :func:`package_bytes` counts."""
    root = Path(package).resolve()
    h = hashlib.sha256()
    for e in package_entries(root):
        digest = f"-> {e.link}" if e.link is not None else sha256_file(e.path)
        h.update(f"{e.path.relative_to(root).as_posix()}\0{digest}\n".encode())
    return h.hexdigest()


def check_tokenizer(package: str | Path, manifest: Manifest, source_checkpoint: str | Path) -> None:
    """The package's tokenizer must be the source's: same vocabulary and merges."""
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(Path(package) / manifest.tokenizer)
    ours = AutoTokenizer.from_pretrained(source_checkpoint)
    if theirs.get_vocab() != ours.get_vocab():
        raise SubmissionError(
            f"{Path(package) / MANIFEST}: field 'tokenizer': vocabulary differs from source '{manifest.source}'"
        )
    probe = "def f(x):\n    return x ** 2  # Grüße, 数据"
    if theirs(probe, add_special_tokens=False)["input_ids"] != ours(probe, add_special_tokens=False)["input_ids"]:
        raise SubmissionError(
            f"{Path(package) / MANIFEST}: field 'tokenizer': tokenizes differently from source '{manifest.source}'"
        )
