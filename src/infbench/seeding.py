"""Stable seeds derived from a base seed and names (never Python's salted hash)."""

from __future__ import annotations

import hashlib


def derive_seed(base: int, *names: object) -> int:
    """A 63-bit seed that depends only on ``base`` and ``names``."""
    h = hashlib.sha256(str(base).encode())
    for name in names:
        h.update(b"\0" + str(name).encode())
    return int.from_bytes(h.digest()[:8], "little") >> 1
