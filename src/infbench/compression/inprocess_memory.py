"""The worker's own count of the model storage it holds (PROTOCOL A2): every distinct storage behind live
tensors and arrays, plus what a runtime holds natively. Run inside the sandboxed worker; the pipeline takes
``S_res`` as the larger of this and what it measures from outside (:mod:`infbench.compression.storage`)."""

from __future__ import annotations

import gc
import itertools
import sys
from typing import Any

import numpy as np


def _torch():
    """torch where the runtime imported it (a llama.cpp worker never does): its tensors are counted too."""
    return sys.modules.get("torch")


def _storage_key(obj: Any) -> tuple[tuple, int] | None:
    torch = _torch()
    if torch is not None and isinstance(obj, torch.Tensor):
        if obj.device.type == "meta":
            return None
        try:
            storage = obj.untyped_storage()
            return (obj.device.type, storage.data_ptr()), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # sparse, fake or functional tensors own no storage
            return None
    if isinstance(obj, np.ndarray):
        base = obj
        while isinstance(base.base, np.ndarray):
            base = base.base
        if base.nbytes == 0:
            return None
        return ("numpy", base.__array_interface__["data"][0]), base.nbytes
    return None


def live_cpu_bytes() -> int:
    """Bytes of every distinct CPU storage behind live tensors and arrays.

    The candidates are every object the garbage collector tracks and everything those refer to (NumPy arrays
    are not tracked themselves), chosen by ``type()`` in C-level passes. Testing each with ``isinstance`` (which
    also reads a proxy's ``__class__``) took 2.2-2.5 s in a worker that imports transformers (400,000 objects,
    2.4 million candidates); this takes about 1 s.
    """
    gc.collect()
    objects = gc.get_objects()
    candidates = objects + gc.get_referents(*objects)
    del objects
    types = list(map(type, candidates))
    torch = _torch()
    counted = (np.ndarray,) if torch is None else (torch.Tensor, np.ndarray)
    kinds = {t for t in set(types) if issubclass(t, counted)}
    seen: dict[tuple, int] = {}
    for candidate in itertools.compress(candidates, map(kinds.__contains__, types)):
        found = _storage_key(candidate)
        if found is None or found[0][0] == "cuda":
            continue
        key, nbytes = found
        seen[key] = max(seen.get(key, 0), nbytes)
    return sum(seen.values())


def resident_bytes(device: str, native_bytes: int = 0) -> int:
    """The in-process figure: live tensors and arrays plus bytes a runtime holds natively (llama.cpp's model).

    On CUDA the device allocator's bytes on every visible GPU plus every live host-side storage: a copy kept in
    host memory
    (a full-precision twin, offloaded weights) is model storage too.
    """
    host = live_cpu_bytes() + native_bytes
    if device.startswith("cuda"):
        import torch

        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)
        # cuBLAS keeps its matmul workspaces (32 MiB per handle by default) in the caching allocator:
        # temporary workspace, not model storage
        torch._C._cuda_clearCublasWorkspaces()
        # every visible GPU: a model too large for one is spread over several (hf_loading.from_pretrained_on)
        return sum(int(torch.cuda.memory_allocated(i)) for i in range(torch.cuda.device_count())) + host
    return host
