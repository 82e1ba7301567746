"""Device names: ``auto`` is CUDA when a GPU is visible (``CUDA_VISIBLE_DEVICES``), else the CPU."""

from __future__ import annotations


def resolve(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
