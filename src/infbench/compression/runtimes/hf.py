"""Runtime ``hf``: a transformers checkpoint (including GPTQModel output)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from infbench.compression.hf_runtime import cache_kwargs, from_pretrained_on


def _load(checkpoint: Path, device: str):
    import json

    config = json.loads((checkpoint / "config.json").read_text())
    method = (config.get("quantization_config") or {}).get("quant_method")
    if method == "gptq":
        from gptqmodel import BACKEND, GPTQModel

        if device == "cpu":
            # GPTQModel's CPU kernel (TorchLinear) torch.compiles its dequantization at load; the compiled graphs
            # kept about 64 MB of tensors alive after the first call and wrote about 150 MB of inductor cache
            # to /tmp (S_res 109 -> 173 MB for the 4-bit SmolLM2 package). Eager dequantization instead.
            torch._dynamo.config.disable = True
        model = GPTQModel.load(str(checkpoint), device=device, backend=BACKEND.TORCH).model
        model.__dict__.pop("tokenizer", None)  # GPTQModel hangs its tokenizer on the model; the pipeline tokenizes
        return model
    return from_pretrained_on(checkpoint, device, dtype="auto")


@contextlib.contextmanager
def _dequantized_once_per_call(model):
    """GPTQModel's CPU kernel (TorchLinear) dequantizes a layer's weights on every forward pass, which in greedy
    generation at batch one is a whole dequantization per token (about 5 tokens/s at 4 bits and far fewer at 3
    bits on 2 cores). Within one generation call each layer keeps the weights it dequantized (GPTQModel's own
    weight cache) and drops them when the call ends: workspace of the call, like a KV cache, never resident
    storage, which is measured after load and after inference."""
    layers = [m for m in model.modules() if hasattr(m, "_cache_enabled") and hasattr(m, "clear_weight_cache")]
    for m in layers:
        m._cache_enabled = True
    try:
        yield
    finally:
        for m in layers:
            m._cache_enabled = False
            m.clear_weight_cache()


class HFRunner:
    def __init__(self, checkpoint: Path, device: str):
        self.device = torch.device(device)
        self.model = _load(checkpoint, str(self.device)).eval()

    @torch.inference_mode()
    def logits(self, input_ids: np.ndarray, n_last: int) -> np.ndarray:
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, logits_to_keep=n_last, use_cache=False).logits
        return out.float().cpu().numpy()

    @torch.inference_mode()
    def generate(self, input_ids: list[int], max_new_tokens: int) -> Iterator[int]:
        ids = torch.as_tensor([input_ids], dtype=torch.long, device=self.device)
        with _dequantized_once_per_call(self.model):
            out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
            for step in range(max_new_tokens):
                token = out.logits[:, -1].argmax(-1)
                yield int(token)
                if step + 1 < max_new_tokens:
                    out = self.model(input_ids=token.unsqueeze(-1), use_cache=True, **cache_kwargs(out))

    def release(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
