"""Runtime ``hf``: a transformers checkpoint (including GPTQModel output)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from infbench.bf16_on_cpu import float32_products_on_cpu, float32_weights_held
from infbench.hf_loading import cache_kwargs, from_pretrained_on


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
        return float32_products_on_cpu(model)
    return from_pretrained_on(checkpoint, device, dtype="auto")


PREFILL_BLOCK = 64  # tokens per prompt block of HFRunner.generate


def _croppable(model) -> bool:
    """Whether every layer's KV cache is full attention (a cache that can be cropped after padding)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    types = getattr(config, "layer_types", None) or ["full_attention"]
    return set(types) == {"full_attention"} and not getattr(config, "sliding_window", None)


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

    def _prefill(self, input_ids: list[int]):
        """The prompt's forward pass: the last position's logits and the KV cache.

        On the CPU every new matrix shape makes oneDNN build and keep (in its primitive cache, up to 1,024)
        kernels for it, about 2.4 MB per prompt length for SmolLM2 in bf16, so prompts of many lengths (the
        accuracy gate's) grew the process by 65 MB: memory charged to ``S_res`` that no package holds. The
        prompt therefore goes in blocks of ``PREFILL_BLOCK`` tokens, the last one padded by repeating its last
        token and the padding cropped from the cache afterwards (causal attention: padding after the prompt
        changes nothing before it), so a generation only ever runs two shapes, a block and one token; each block
        computes one position's logits (the last block its last real position), not the block's. Models
        whose cache cannot be cropped (linear-attention or sliding-window layers) take the prompt at once."""
        ids = torch.as_tensor([input_ids], dtype=torch.long, device=self.device)
        if not _croppable(self.model):
            out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
            return out.logits[:, -1], out
        pad = -len(input_ids) % PREFILL_BLOCK
        ids = torch.cat([ids, ids[:, -1:].expand(1, pad)], dim=1)
        out, kwargs = None, {}
        for start in range(0, ids.shape[1], PREFILL_BLOCK):
            last = start + PREFILL_BLOCK == ids.shape[1]
            # one position's logits per block: the prompt's last real one in the last block
            keep = torch.tensor([PREFILL_BLOCK - 1 - pad], device=self.device) if last else 1
            out = self.model(
                input_ids=ids[:, start : start + PREFILL_BLOCK], use_cache=True, logits_to_keep=keep, **kwargs
            )
            kwargs = cache_kwargs(out)
        if pad:  # (transformers before 5.24 reads crop(0) as "keep 0 tokens")
            (cache,) = kwargs.values()
            cache.crop(-pad)
        return out.logits[:, -1], out

    @torch.inference_mode()
    def generate(self, input_ids: list[int], max_new_tokens: int) -> Iterator[int]:
        with _dequantized_once_per_call(self.model), float32_weights_held(self.model):
            logits, out = self._prefill([int(t) for t in input_ids])
            for step in range(max_new_tokens):
                token = logits.argmax(-1)
                yield int(token)
                if step + 1 < max_new_tokens:
                    out = self.model(input_ids=token.unsqueeze(-1), use_cache=True, **cache_kwargs(out))
                    logits = out.logits[:, -1]

    def release(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
