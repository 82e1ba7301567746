"""Runtime ``hf``: a transformers checkpoint (including GPTQModel output), behind the package interface
(:mod:`infbench.compression.package_api`). The source itself runs through it for ``A(p)``, so the source and
every candidate are driven by the same code and batch sizes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
import torch

from infbench.bf16_on_cpu import float32_products_on_cpu, float32_weights_held
from infbench.errors import InfbenchError
from infbench.hf_loading import cache_kwargs, from_pretrained_on

PREFILL_BLOCK = 64  # tokens per prompt block of a prefill


class NotCausal(InfbenchError):
    """A checkpoint whose attention is not causal (one-pass scoring would let a position see later tokens)."""


def _load(checkpoint: Path, device: str, dtype: str):
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
    return from_pretrained_on(checkpoint, device, dtype=dtype if dtype == "auto" else getattr(torch, dtype))


_BIDIRECTIONAL = ("use_bidirectional_attention", "is_encoder_decoder", "bidirectional")


def require_causal(model) -> None:
    """Refuse a model one forward pass of which could let a position attend to later ones: a config that asks
    for bidirectional attention, or an attention module that says it is not causal."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for key in _BIDIRECTIONAL:
        if getattr(config, key, False) or getattr(model.config, key, False):
            raise NotCausal(f"config.json: '{key}' is set; a package's model must be causal")
    for name, module in model.named_modules():
        if getattr(module, "is_causal", True) is False:
            raise NotCausal(f"module '{name}' ({type(module).__name__}) is not causal")


@contextlib.contextmanager
def _dequantized_once(model):
    """GPTQModel's CPU kernel (TorchLinear) dequantizes a layer's weights on every forward pass, which in greedy
    generation is a whole dequantization per step (about 5 tokens/s at 4 bits and far fewer at 3 bits on 2
    cores). Within one batch's generation each layer keeps the weights it dequantized (GPTQModel's own weight
    cache) and drops them when the batch ends: workspace of the generation, like a KV cache, never resident
    storage, which is measured after ``release``."""
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
    """A transformers model behind :mod:`~infbench.compression.package_api`: ``score`` in one pass; ``prefill``
    left-pads its rows to a common length (a multiple of ``PREFILL_BLOCK``) and feeds them in blocks of that many
    tokens, with the padding masked and positions counted from each row's first real token; ``step`` feeds one
    token per live row, dropping ended rows from the cache.

    On the CPU every new matrix shape makes oneDNN build and keep kernels (its primitive cache), about 2.4 MB per
    shape for SmolLM2 in BF16: memory charged to ``S_res`` that no package holds. Blocks keep a prefill's shapes
    to a few, whatever the prompt lengths."""

    def __init__(self, checkpoint: Path, device: str, dtype: str = "auto"):
        """``dtype``: the checkpoint's own (``auto``, a package) or one to cast it to (the source's ``A(p)``)."""
        from infbench.device import resolve

        self.device = torch.device(resolve(device))
        self.model = _load(checkpoint, str(self.device), dtype).eval()
        require_causal(self.model)
        self._batch: _Batch | None = None

    @classmethod
    def of(cls, model: torch.nn.Module) -> HFRunner:
        """A runner of a model already loaded (the warm-up's twin)."""
        runner = cls.__new__(cls)
        runner.device, runner.model, runner._batch = next(model.parameters()).device, model, None
        return runner

    def _end_batch(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None

    @torch.inference_mode()
    def score(self, ids: np.ndarray, n_last: int) -> torch.Tensor:
        self._end_batch()
        x = torch.as_tensor(np.asarray(ids), dtype=torch.long, device=self.device)
        return self.model(input_ids=x, logits_to_keep=int(n_last), use_cache=False).logits

    @torch.inference_mode()
    def prefill(self, rows: list[np.ndarray], max_new_tokens: int) -> torch.Tensor:
        self._end_batch()
        self._batch = _Batch(self.model, self.device)
        return self._batch.prefill(rows)

    @torch.inference_mode()
    def step(self, tokens: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        if self._batch is None:
            raise RuntimeError("step before prefill")
        return self._batch.step(np.asarray(tokens), np.asarray(rows))

    def release(self) -> None:
        self._end_batch()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


class _Batch:
    """One batch's generation state: its KV cache, attention mask, each row's next position and the live rows."""

    def __init__(self, model, device: torch.device):
        self.model, self.device = model, device
        self.scope = contextlib.ExitStack()
        self.scope.enter_context(_dequantized_once(model))
        self.scope.enter_context(float32_weights_held(model))
        self.cache: dict = {}
        self.mask = self.positions = self.live = None

    def close(self) -> None:
        self.cache = {}
        self.scope.close()

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1, **self.cache
        )
        self.cache = cache_kwargs(out)
        return out.logits[:, -1]

    def prefill(self, rows: list[np.ndarray]) -> torch.Tensor:
        lengths = [len(r) for r in rows]
        width = -(-max(lengths) // PREFILL_BLOCK) * PREFILL_BLOCK
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.as_tensor(np.asarray(row, dtype=np.int64))
            mask[i, width - len(row) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        for start in range(0, width, PREFILL_BLOCK):
            end = start + PREFILL_BLOCK
            logits = self._forward(ids[:, start:end], mask[:, :end], positions[:, start:end])
        self.mask, self.positions = mask, positions[:, -1]
        self.live = np.arange(len(rows))
        return logits

    def step(self, tokens: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        if not np.array_equal(rows, self.live):
            keep = torch.as_tensor(np.searchsorted(self.live, rows), device=self.device)
            (cache,) = self.cache.values()
            cache.batch_select_indices(keep)
            self.mask, self.positions, self.live = self.mask[keep], self.positions[keep], rows
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(rows), 1))], dim=1)
        self.positions = self.positions + 1
        ids = torch.as_tensor(tokens, dtype=torch.long, device=self.device).unsqueeze(-1)
        return self._forward(ids, self.mask, self.positions.unsqueeze(-1))
