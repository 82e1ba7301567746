"""Loading a transformers checkpoint for sampling and scoring."""

from __future__ import annotations

import torch

from infbench.compression.device import resolve


def load_causal_lm(checkpoint: str, dtype: str, device: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype))
    model.to(torch.device(resolve(device)))
    model.eval()
    return model
