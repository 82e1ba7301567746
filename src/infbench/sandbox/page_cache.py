"""Forgetting the page cache of the files every sandbox shares, so that one sandbox cannot tell a later one
anything through it.

The runtime bound read-only into every sandbox is the host's files, and so is their page cache. No syscall
filter hides which of their pages are resident from a process that maps them (a fault maps the resident pages
around it, which its own page table shows; a first read of a resident page is fast): a sandbox can leave bits
there and a later one read them (docs/sandbox.md, "What remains"). Where a check relies on a second sandbox
knowing nothing of a first that has ended (``statefulness``), the pipeline drops the page cache of every regular
file bound into the sandbox before the second one runs any code of the package: what stays resident is then what
live processes map (the pipeline's own imports, the second worker's), the same whatever the first one did.
"""

from __future__ import annotations

import os
import stat
import time


def forget(paths: list[str] | tuple[str, ...]) -> dict:
    """``POSIX_FADV_DONTNEED`` on every regular file at or below ``paths`` (host paths; links not followed):
    their pages that no process maps leave the page cache. How many files, and the seconds it took."""
    start, files = time.monotonic(), 0
    for path in paths:
        for root, _, names in os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [path])]:
            for name in names:
                files += _forget_file(os.path.join(root, name))
    return {"files": files, "seconds": round(time.monotonic() - start, 3)}


def _forget_file(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return 1
    finally:
        os.close(fd)
