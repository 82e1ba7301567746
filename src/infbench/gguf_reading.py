"""Reading GGUF files at the speed of the disk.

``gguf.GGUFReader`` slices a ``numpy.memmap`` for every field part: each slice builds a memmap subclass
(about 3 us), and a 49,152-token vocabulary with its merges is half a million slices, 5.7 s per parse of
SmolLM2-135M's file. :class:`Reader` slices a plain array view of the same mapping instead (the same bytes,
no copy; 2.6 s). transformers also parses one file three times to load a model (tokenizer, config,
weights) and builds llama.cpp's tensor-name map once per module (397 times for SmolLM2):
:func:`for_transformers` hands it one parse per file and one map per architecture. Materializing the
embedded source went from 42 s to 13 s, byte for byte the same files.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np

_Original = gguf.GGUFReader


class Reader(_Original):
    """``gguf.GGUFReader`` over a plain array view of its memory map."""

    def _get(self, offset: int, dtype, count: int = 1, override_order=None) -> np.ndarray:
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self._plain = self.data.view(np.ndarray)
        dtype, count = np.dtype(dtype), int(count)
        arr = plain[offset : offset + dtype.itemsize * count].view(dtype=dtype)[:count]
        return arr.view(arr.dtype.newbyteorder(self.byte_order if override_order is None else override_order))


@contextlib.contextmanager
def for_transformers() -> Iterator[None]:
    """While active, ``gguf.GGUFReader`` (which transformers imports at each call) gives one shared
    :class:`Reader` per file, and ``gguf.get_tensor_name_map`` one map per (architecture, layers)."""
    readers: dict[tuple[str, str], Reader] = {}

    def shared(path, mode: str = "r") -> Reader:
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = Reader(path, mode)
        return readers[key]

    name_map = gguf.get_tensor_name_map
    gguf.GGUFReader, gguf.get_tensor_name_map = shared, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = _Original, name_map
