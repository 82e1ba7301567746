"""Loading a transformers checkpoint for sampling and scoring."""

from __future__ import annotations

import torch


def resolve_device(device: str) -> torch.device:
    """``auto`` is the first GPU that ``CUDA_VISIBLE_DEVICES`` leaves visible, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_causal_lm(checkpoint: str, dtype: str, device: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype))
    model.to(resolve_device(device))
    model.eval()
    return model
