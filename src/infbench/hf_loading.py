"""Loading a transformers checkpoint and handing its KV cache from step to step, for both tracks: sampling
and scoring, the ``hf`` package runtime, the answer references, the serving reference and the starter server."""

from __future__ import annotations

import torch

from infbench.bf16_on_cpu import float32_products_on_cpu
from infbench.device import resolve


def cache_kwargs(out) -> dict:
    """The keyword that hands a forward pass's KV cache to the next one: ``cache`` in transformers 5.24
    (which deprecates ``past_key_values``), ``past_key_values`` in earlier 5.x (e.g. GPU images with 5.17)."""
    return {"cache": out.cache} if hasattr(out, "cache") else {"past_key_values": out.past_key_values}


def from_pretrained_on(checkpoint, device: str, **kwargs):
    """A transformers checkpoint on ``device``. With ``cuda`` and more than one GPU visible it is spread over
    all of them (``device_map="auto"``, accelerate): a job is given several GPUs (``sources.<name>.devices``)
    because its model does not fit one, as a BF16 MoE source (PROTOCOL A6: two GPUs). Inputs go to the first
    GPU; accelerate moves activations from layer to layer. A BF16 model on a CPU without BF16 instructions
    computes its products in float32 (:mod:`infbench.bf16_on_cpu`)."""
    from transformers import AutoModelForCausalLM

    device = resolve(device)
    if device == "cuda" and torch.cuda.device_count() > 1:
        return AutoModelForCausalLM.from_pretrained(checkpoint, device_map="auto", **kwargs)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs).to(torch.device(device))
    return float32_products_on_cpu(model)


def load_causal_lm(checkpoint: str, dtype: str, device: str):
    model = from_pretrained_on(checkpoint, device, dtype=getattr(torch, dtype))
    model.eval()
    return model
