"""The worker's in-process count of live tensors and arrays (infbench.compression.inprocess_memory)."""

import numpy as np
import torch

from infbench.compression.inprocess_memory import live_cpu_bytes


class _ClaimsToBeATensor:
    """An object whose ``__class__`` says torch.Tensor: it holds no storage and is not counted."""

    @property
    def __class__(self):
        return torch.Tensor


def test_each_storage_behind_live_tensors_and_arrays_is_counted_once():
    before = live_cpu_bytes()
    array = np.ones(1_000_000, dtype=np.uint8)  # not tracked by the garbage collector: found as a referent
    held = {"in a dict": [array[10:], array[:10]]}  # views of it: its buffer once
    weight = torch.nn.Parameter(torch.ones(250_000))  # 1,000,000 bytes
    tied = [weight, weight.data[:100], torch.ones(3, dtype=torch.uint8)]  # the same storage, and 3 bytes
    impostor = _ClaimsToBeATensor()
    assert live_cpu_bytes() - before == 2_000_003
    del array, held, weight, tied, impostor
    assert live_cpu_bytes() == before
