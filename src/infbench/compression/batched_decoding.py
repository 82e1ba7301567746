"""Batched decoding for the sampler: one forward pass per new token for a whole batch of equal-length rows.

``StaticDecoder`` keeps the KV cache in transformers' ``StaticCache`` (allocated once, written in place).
Every row of a batch sits at the same position (the sampler's contexts all have the same length), so one
position and one attention-mask row serve the whole batch. A step's attention reads the cache only up to the
end of its *window* (slots rounded up to ``window`` tokens), not the cache's whole length, and the query
heads of the single new token are packed onto their key/value heads (grouped-query attention without copying
the cache). On CUDA, each window's step is captured once as a CUDA graph and replayed: one launch from Python
per token instead of several hundred.

``DynamicDecoder`` is the model's own dynamic cache, for models whose cache layers are not all plain
full-attention layers (sliding windows, linear attention, state-space layers).
"""

from __future__ import annotations

import contextvars
import inspect

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, StaticCache
from transformers.cache_utils import StaticLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from infbench.compression.hf_runtime import cache_kwargs

ATTENTION = "infbench_windowed_sdpa"
_window_end: contextvars.ContextVar[int | None] = contextvars.ContextVar("window_end", default=None)


def windowed_sdpa(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' SDPA attention over the cache slots before the current window's end; a single query
    token's heads attend as ``[batch, kv_heads, group, dim]`` (no repeated keys and values)."""
    end = _window_end.get()
    if end is not None:
        key, value = key[:, :, :end], value[:, :, :end]
        attention_mask = None if attention_mask is None else attention_mask[..., :end]
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    if q_len == 1 and heads != kv_heads:
        packed = query.reshape(batch, kv_heads, heads // kv_heads, dim)
        out = F.scaled_dot_product_attention(packed, key, value, attn_mask=attention_mask, scale=scaling)
        return out.reshape(batch, heads, 1, dim).transpose(1, 2), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


AttentionInterface.register(ATTENTION, windowed_sdpa)


def _cache_argument(model) -> str:
    """``cache`` in transformers 5.24, ``past_key_values`` in earlier 5.x."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def static_cache(model, max_len: int) -> StaticCache | None:
    """A static cache for ``model`` when every one of its layers is a plain full-attention layer, else None."""
    try:
        cache = StaticCache(config=model.config, max_cache_len=max_len)
    except (ValueError, KeyError, NotImplementedError):
        return None
    return cache if all(type(layer) is StaticLayer for layer in cache.layers) else None


def kv_bytes_per_token(model) -> int:
    """Key and value bytes one token adds to the cache of ``model`` (all layers)."""
    cfg = model.config.get_text_config(decoder=True)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()


def rows_that_fit(model, context_len: int, max_len: int, free_bytes: int, share: float = 0.8) -> int:
    """Rows of a sampling batch that fit in ``share`` of ``free_bytes``: each row's cache for ``max_len``
    tokens, its prefill activations (``context_len`` tokens) and its per-step vocabulary workspace (bf16
    logits, float32 log-probs, float64 probabilities and their running sum)."""
    cfg = model.config.get_text_config(decoder=True)
    elem = next(model.parameters()).element_size()
    prefill = context_len * (8 * cfg.hidden_size + 3 * cfg.intermediate_size) * elem
    vocab = cfg.vocab_size * (elem + 3 * 4 + 2 * 8)
    return max(1, int(share * free_bytes) // (kv_bytes_per_token(model) * max_len + prefill + vocab))


class StaticDecoder:
    def __init__(self, model, batch: int, max_len: int, *, cache: StaticCache, window: int, cuda_graphs: bool):
        device = next(model.parameters()).device
        self.model, self.cache, self.window, self.max_len = model, cache, window, max_len
        self.cuda_graphs = cuda_graphs and device.type == "cuda"
        self.argument = _cache_argument(model)
        self.mask = torch.zeros((batch, 1, 1, max_len), dtype=torch.bool, device=device)
        self.token = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.position = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.length = 0
        self.graph, self.graph_end, self.logits = None, None, None
        self.saved_attention = model.config._attn_implementation
        model.config._attn_implementation = ATTENTION

    def _forward(self, ids, positions, mask, end: int) -> torch.Tensor:
        reset = _window_end.set(end)
        try:
            out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                             logits_to_keep=1, **{self.argument: self.cache})
        finally:
            _window_end.reset(reset)
        return out.logits[:, -1]

    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        self.mask[..., :n] = True
        self.length = n
        positions = torch.arange(n, device=ids.device).unsqueeze(0)
        return self._forward(ids, positions, None, n)

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Logits after feeding ``token`` (one per row) at the next position."""
        self.token.copy_(token.unsqueeze(-1))
        self.position.fill_(self.length)
        self.mask[..., self.length] = True
        end = min(self.max_len, (self.length // self.window + 1) * self.window)
        self.length += 1
        if not self.cuda_graphs:
            return self._forward(self.token, self.position, self.mask, end)
        if self.graph_end is None:  # first step: run it eagerly on a side stream (lazy initialisation), as a warm-up
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                logits = self._forward(self.token, self.position, self.mask, end)
            torch.cuda.current_stream().wait_stream(side)
            self.graph_end = -1
            return logits
        if end != self.graph_end:  # a new window: capture its step into the previous graph's memory pool
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=None if self.graph is None else self.graph.pool()):
                logits = self._forward(self.token, self.position, self.mask, end)
            self.graph, self.logits, self.graph_end = graph, logits, end
        self.graph.replay()
        return self.logits

    def close(self) -> None:
        self.model.config._attn_implementation = self.saved_attention
        self.graph = self.logits = self.cache = None


class DynamicDecoder:
    def __init__(self, model):
        self.model, self.cache = model, {}

    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
        self.cache = cache_kwargs(out)
        return out.logits[:, -1]

    def step(self, token: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=token.unsqueeze(-1), use_cache=True, logits_to_keep=1, **self.cache)
        self.cache = cache_kwargs(out)
        return out.logits[:, -1]

    def close(self) -> None:
        self.cache = {}


def decoder(model, batch: int, max_len: int, *, window: int, cuda_graphs: bool):
    cache = static_cache(model, max_len)
    if cache is None:
        return DynamicDecoder(model)
    return StaticDecoder(model, batch, max_len, cache=cache, window=window, cuda_graphs=cuda_graphs)
