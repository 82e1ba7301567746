"""The files of a submission, whichever track it is for: a CompressionBench package, a server submission's
directory, an agent run's published versions (docs/submission.md, docs/server_submission.md).

A submission holds its own bytes: every name under it counts (hidden files and ``__pycache__/`` included), a
symlink may point only inside it, a hard link may have no name outside it, and no special file (FIFO,
socket, device) is allowed. :func:`package_entries` lists the names, checked before any file is read;
:func:`package_bytes` (``S_pkg``) and :func:`content_hash` are over those names.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from infbench.errors import InfbenchError
from infbench.hashing import sha256_file


class PackageFilesError(InfbenchError):
    """A submission's files break the rule above; the message names the file."""


@dataclass(frozen=True)
class PackageEntry:
    """One name in a package: a regular file (``link`` None) or a symlink to a path inside the package."""

    path: Path
    size: int  # bytes it holds on disk (a symlink: the length of its target path)
    inode: tuple[int, int] | None  # (st_dev, st_ino) of a regular file; hard links share it
    link: str | None = None


def _reject(path: Path, why: str) -> PackageFilesError:
    return PackageFilesError(f"{path}: {why}; a package must hold its own bytes")


def package_entries(package: str | Path) -> list[PackageEntry]:
    """Every name under the package, hidden files and ``__pycache__/`` included, in path order.

    A symlink is followed only to check where it points: one that leaves the
    package is rejected, as is a hard link whose inode also has a name outside
    the package (``st_nlink`` above the names found inside), any special file
    (FIFO, socket, device) and a package directory that is itself a symlink
    (its target's files are not the submitter's), each with a
    :class:`PackageFilesError` naming the file.
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
