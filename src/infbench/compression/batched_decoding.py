"""Batched decoding for the sampler: one forward pass per new token for a whole batch of equal-length rows.

``StaticDecoder`` keeps the KV cache in transformers' ``StaticCache`` (allocated once, written in place).
Every row of a batch sits at the same position (the sampler's contexts all have the same length). The prefill
is SDPA with ``is_causal`` over exactly the context's slots. A step's attention reads only what the cache
holds:

- on CUDA (:func:`exact_decoding`), a split-K kernel (:mod:`infbench.compression.cuda_attention`) that takes
  each row's cached length as a device tensor: it reads exactly the cached keys and values, needs no mask, and
  one CUDA graph serves every step;
- elsewhere (the CPU, head sizes the kernel lacks), it reads the cache up to the end of its *window* (slots
  rounded up to ``window`` tokens) with a mask over the window's unused slots; on CUDA each window's step is
  then its own graph.

Either way the single new token's query heads are packed onto their key/value heads (grouped-query attention
without repeating the cache). On CUDA the step is captured as a CUDA graph and replayed: one launch from
Python per token instead of several hundred; Llama-style layers' elementwise steps are then fused kernels
(:mod:`infbench.compression.fused_elementwise`).

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

from infbench.compression import fused_elementwise
from infbench.hf_loading import cache_kwargs

ATTENTION = "infbench_cached_attention"


class ExactLengths:
    """What a decode step's attention reads: every row's cached length (``used``, a device tensor written
    before each step, so a captured graph reads the step's lengths)."""

    def __init__(self, batch: int, device: torch.device):
        self.used = torch.zeros(batch, dtype=torch.int32, device=device)

    def attend(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float | None):
        from infbench.compression import cuda_attention

        return cuda_attention.decode_attention(query, key, value, self.used, scale)


# what the forward pass in progress may read: a window's end (slots before it), or exact per-row lengths
_reads: contextvars.ContextVar[int | ExactLengths | None] = contextvars.ContextVar("cache_reads", default=None)


def cached_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """transformers' attention over the cache slots the forward pass in progress may read (see module doc)."""
    reads = _reads.get()
    if isinstance(reads, ExactLengths) and query.shape[2] == 1:
        return reads.attend(query, key, value, scaling), None
    if isinstance(reads, int):
        key, value = key[:, :, :reads], value[:, :, :reads]
        attention_mask = None if attention_mask is None else attention_mask[..., :reads]
    batch, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    if q_len == 1 and heads != kv_heads:
        packed = query.reshape(batch, kv_heads, heads // kv_heads, dim)
        out = F.scaled_dot_product_attention(packed, key, value, attn_mask=attention_mask, scale=scaling)
        return out.reshape(batch, heads, 1, dim).transpose(1, 2), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


AttentionInterface.register(ATTENTION, cached_attention)


def _cache_argument(model) -> str:
    """``cache`` in transformers 5.24, ``past_key_values`` in earlier 5.x."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


class SlotLayer(StaticLayer):
    """A ``StaticLayer`` that writes new keys and values at ``slots`` (the decoder's one index tensor for
    every layer, set before each forward pass) instead of deriving the slots from its own running length: two
    kernels per layer and step instead of five."""

    def __init__(self, max_cache_len: int, slots: torch.Tensor):
        super().__init__(max_cache_len=max_cache_len)
        self.slots = slots

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys.index_copy_(2, self.slots, key_states)
        self.values.index_copy_(2, self.slots, value_states)
        return self.keys, self.values


def static_cache(model, max_len: int) -> StaticCache | None:
    """A static cache for ``model`` when every one of its layers is a plain full-attention layer, else None."""
    try:
        cache = StaticCache(config=model.config, max_cache_len=max_len)
    except (ValueError, KeyError, NotImplementedError):
        return None
    return cache if all(type(layer) is StaticLayer for layer in cache.layers) else None


def _write_at(cache: StaticCache, slots: torch.Tensor) -> None:
    """Every layer of ``cache`` writes at ``slots`` from now on (its layers become :class:`SlotLayer`)."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is StaticLayer:
            cache.layers[i] = SlotLayer(layer.max_cache_len, slots)
        cache.layers[i].slots = slots


def _head_dim(cfg) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def exact_decoding(model) -> bool:
    """Whether decode steps of ``model`` read exactly the cache (:mod:`infbench.compression.cuda_attention`):
    a CUDA device and a head size of a power of two from 16 to 256."""
    dim = _head_dim(model.config.get_text_config(decoder=True))
    return next(model.parameters()).device.type == "cuda" and 16 <= dim <= 256 and dim & (dim - 1) == 0


def kv_bytes_per_token(model) -> int:
    """Key and value bytes one token adds to the cache of ``model`` (all layers)."""
    cfg = model.config.get_text_config(decoder=True)
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * _head_dim(cfg) * next(model.parameters()).element_size()


def rows_that_fit(model, context_len: int, max_len: int, free_bytes: int, share: float = 0.8) -> int:
    """Rows of a sampling batch that fit in ``share`` of ``free_bytes``: each row's cache for ``max_len``
    tokens, its prefill activations (``context_len`` tokens) and its per-step vocabulary workspace (the
    logits, and three float32 rows: the log-probs, and at a temperature other than 1 the scaled logits and
    their log-probs; the CUDA draw keeps no float64 row)."""
    cfg = model.config.get_text_config(decoder=True)
    elem = next(model.parameters()).element_size()
    prefill = context_len * (8 * cfg.hidden_size + 3 * cfg.intermediate_size) * elem
    vocab = cfg.vocab_size * (elem + 3 * 4)
    return max(1, int(share * free_bytes) // (kv_bytes_per_token(model) * max_len + prefill + vocab))


def free_device_bytes(device: torch.device) -> int:
    """Bytes a new allocation on ``device`` can take: the device's free memory and what PyTorch's caching
    allocator holds reserved but unused (earlier work's blocks, which it hands out again)."""
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


class StaticDecoder:
    def __init__(self, model, batch: int, max_len: int, *, cache: StaticCache, window: int, cuda_graphs: bool):
        device = next(model.parameters()).device
        self.model, self.cache, self.window, self.max_len = model, cache, window, max_len
        self.cuda_graphs = cuda_graphs and device.type == "cuda"
        self.argument = _cache_argument(model)
        self.exact = ExactLengths(batch, device) if exact_decoding(model) else None
        self.mask = None if self.exact else torch.zeros((batch, 1, 1, max_len), dtype=torch.bool, device=device)
        self.token = torch.zeros((batch, 1), dtype=torch.long, device=device)
        self.position = torch.zeros((1, 1), dtype=torch.long, device=device)  # also the slot a step writes
        self.length = 0
        self.graph, self.graph_key, self.logits = None, None, None
        self.saved_attention = model.config._attn_implementation
        model.config._attn_implementation = ATTENTION
        self.undo_fusion = fused_elementwise.apply(model)

    def _forward(self, ids, positions, mask, reads: int | ExactLengths) -> torch.Tensor:
        reset = _reads.set(reads)
        try:
            out = self.model(
                input_ids=ids,
                position_ids=positions,
                attention_mask=mask,
                use_cache=True,
                logits_to_keep=1,
                **{self.argument: self.cache},
            )
        finally:
            _reads.reset(reset)
        return out.logits[:, -1]

    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        n = ids.shape[1]
        if self.mask is not None:
            self.mask[..., :n] = True
        self.length = n
        positions = torch.arange(n, device=ids.device).unsqueeze(0)
        _write_at(self.cache, positions[0])
        logits = self._forward(ids, positions, None, n)
        _write_at(self.cache, self.position[0])
        return logits

    def step(self, token: torch.Tensor) -> torch.Tensor:
        """Logits after feeding ``token`` (one per row) at the next position."""
        self.token.copy_(token.unsqueeze(-1))
        self.position.fill_(self.length)
        if self.exact is not None:  # every step reads exactly the cache: one graph for all of them
            self.exact.used.fill_(self.length + 1)
            reads, mask, key = self.exact, None, 0
        else:
            self.mask[..., self.length] = True
            end = min(self.max_len, (self.length // self.window + 1) * self.window)
            reads, mask, key = end, self.mask, end
        self.length += 1
        if not self.cuda_graphs:
            return self._forward(self.token, self.position, mask, reads)
        if self.graph_key is None:  # first step: eagerly on a side stream (lazy initialisation), a warm-up
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                logits = self._forward(self.token, self.position, mask, reads)
            torch.cuda.current_stream().wait_stream(side)
            self.graph_key = -1
            return logits
        if key != self.graph_key:  # a new window: capture its step into the previous graph's memory pool
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=None if self.graph is None else self.graph.pool()):
                logits = self._forward(self.token, self.position, mask, reads)
            self.graph, self.logits, self.graph_key = graph, logits, key
        self.graph.replay()
        return self.logits

    def close(self) -> None:
        self.model.config._attn_implementation = self.saved_attention
        self.undo_fusion()
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
