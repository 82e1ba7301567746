"""FLOP and byte counts of a dense decoder-only transformer (full attention), and the bounds they give.

FLOPs are those of the matrix products (2 per multiply-add): the attention projections, the gated MLP, the
output head on the positions that go through it, and causal attention (``QK^T`` and ``PV``: a new token
attends every cached token and itself). Bytes are the fewest a decode step can move: every weight once (an
untied input embedding only by the rows it gathers, which this leaves out), the cached keys and values of
every row, and the new token's.
"""

from __future__ import annotations

from dataclasses import dataclass

from infbench.compression.batched_decoding import kv_bytes_per_token


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    weight_bytes: int
    kv_bytes_per_token: int

    @classmethod
    def of(cls, model) -> Shape:
        cfg = model.config.get_text_config(decoder=True)
        embedding, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
        weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        if embedding is not head:
            weight_bytes -= embedding.numel() * embedding.element_size()
        return cls(
            layers=cfg.num_hidden_layers,
            hidden=cfg.hidden_size,
            heads=cfg.num_attention_heads,
            kv_heads=getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads,
            head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
            intermediate=cfg.intermediate_size,
            vocab=cfg.vocab_size,
            weight_bytes=weight_bytes,
            kv_bytes_per_token=kv_bytes_per_token(model),
        )


def linear_flops(shape: Shape, tokens: int, head_tokens: int) -> int:
    """Projections and MLP for ``tokens`` tokens, the output head for ``head_tokens`` of them."""
    attention = shape.hidden * 2 * (shape.heads + shape.kv_heads) * shape.head_dim
    per_layer = attention + 3 * shape.hidden * shape.intermediate
    return 2 * tokens * shape.layers * per_layer + 2 * head_tokens * shape.hidden * shape.vocab


def attention_flops(shape: Shape, batch: int, new_tokens: int, cached: int = 0) -> int:
    """``QK^T`` and ``PV`` of ``new_tokens`` tokens per row after ``cached`` ones, causal."""
    keys = cached * new_tokens + new_tokens * (new_tokens + 1) // 2
    return 4 * batch * shape.layers * shape.heads * shape.head_dim * keys


def forward_flops(shape: Shape, batch: int, seq_len: int, head_positions: int) -> int:
    """One teacher-forced forward pass of ``batch`` rows of ``seq_len`` tokens, the head on the last
    ``head_positions`` positions of each row."""
    return linear_flops(shape, batch * seq_len, batch * head_positions) + attention_flops(shape, batch, seq_len)


def decode_step_bytes(shape: Shape, batch: int, cached: int) -> int:
    """A decode step of ``batch`` rows with ``cached`` tokens each in the cache."""
    return shape.weight_bytes + batch * (cached + 1) * shape.kv_bytes_per_token


def sampling_bound_s(
    shape: Shape, batch: int, context: int, new_tokens: int, *, matmul_flops_per_s: float, copy_bytes_per_s: float
) -> float:
    """Seconds to sample ``new_tokens`` per row: the prefill at the matmul rate, then ``new_tokens - 1``
    decode steps at the copy bandwidth."""
    prefill = forward_flops(shape, batch, context, 1) / matmul_flops_per_s
    steps = new_tokens - 1
    decode_bytes = steps * shape.weight_bytes + batch * shape.kv_bytes_per_token * (
        steps * (context + 1) + steps * (steps - 1) // 2
    )
    return prefill + decode_bytes / copy_bytes_per_s
