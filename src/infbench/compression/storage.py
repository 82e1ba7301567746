"""Storage accounting (PROTOCOL A2).

``S_pkg`` is every byte of the package (:func:`submission.package_bytes`).
``S_res`` is the model storage still allocated after loading and after
inference with caches released. On CUDA it is the device allocator's
``memory_allocated`` plus the host-side storage below; on the CPU it is every live tensor and NumPy array
reachable from Python objects in the submission's process, each underlying
storage counted once (views and tied weights share storage), plus bytes a
runtime holds natively (llama.cpp's tensors). Measured in the worker process.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import torch


def _storage_key(obj: Any) -> tuple[tuple, int] | None:
    if isinstance(obj, torch.Tensor):
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


def live_cpu_bytes(exclude: list[Any] = ()) -> int:
    """Bytes of every distinct CPU storage behind live tensors and arrays, except ``exclude``'s."""
    gc.collect()
    skip = {found[0] for found in map(_storage_key, exclude) if found}
    seen: dict[tuple, int] = {}
    for obj in gc.get_objects():
        for candidate in (obj, *gc.get_referents(obj)):
            found = _storage_key(candidate)
            if found is None or found[0][0] == "cuda":
                continue
            key, nbytes = found
            if key in skip:
                continue
            seen[key] = max(seen.get(key, 0), nbytes)
    return sum(seen.values())


def resident_bytes(device: str, native_bytes: int = 0, workspace: list[Any] = ()) -> int:
    """``workspace``: buffers of the pipeline's own runtimes (llama.cpp's logits array), not model storage.

    On CUDA the device allocator's bytes plus every live host-side storage: a copy kept in host memory
    (a full-precision twin, offloaded weights) is model storage too.
    """
    host = live_cpu_bytes(workspace) + native_bytes
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        # cuBLAS keeps its matmul workspaces (32 MiB per handle by default) in the caching allocator:
        # temporary workspace, not model storage
        torch._C._cuda_clearCublasWorkspaces()
        return int(torch.cuda.memory_allocated()) + host
    return host
