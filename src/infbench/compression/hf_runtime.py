"""Loading a transformers checkpoint for sampling and scoring; handing its KV cache from step to step."""

from __future__ import annotations

import torch

from infbench.compression.device import resolve


def cache_kwargs(out) -> dict:
    """The keyword that hands a forward pass's KV cache to the next one: ``cache`` in transformers 5.24
    (which deprecates ``past_key_values``), ``past_key_values`` in earlier 5.x (e.g. GPU images with 5.17)."""
    return {"cache": out.cache} if hasattr(out, "cache") else {"past_key_values": out.past_key_values}


def load_causal_lm(checkpoint: str, dtype: str, device: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=getattr(torch, dtype))
    model.to(torch.device(resolve(device)))
    model.eval()
    return model
