"""The sampler's inverse-CDF draw on CUDA in two Triton kernels, without float64 copies of the vocabulary.

:func:`infbench.compression.sampling.draw` materialises ``exp(log_probs)`` in float64 and its cumulative sum,
four float64 passes over ``[rows, vocab]`` per token (about 1 GB per step for 256 rows of a 128k vocabulary).
Here the same arithmetic (each float32 log-prob exponentiated in float64, summed in float64) runs in two
passes over the float32 log-probs: the first sums ``CHUNKS`` slices of every row, the second finds the slice
where the running sum passes ``uniform * total`` and scans only that slice for the first token whose
cumulative probability exceeds it. The sums are associated differently from a sequential cumulative sum, which
moves the result only where ``uniform * total`` lies within float64 rounding of a boundary.

Imported only on CUDA (Triton ships with PyTorch's CUDA builds).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNKS = 64  # slices per row in the first pass
BLOCK = 1024  # tokens per load


@triton.jit
def _slice_sums(log_probs, sums, vocab, row_stride, chunk, CHUNKS: tl.constexpr, BLOCK: tl.constexpr):
    row, part = tl.program_id(0), tl.program_id(1)
    base = log_probs + row.to(tl.int64) * row_stride
    end = tl.minimum((part + 1) * chunk, vocab)
    acc = tl.zeros([BLOCK], dtype=tl.float64)
    for start in range(part * chunk, end, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(base + offs, mask=offs < end, other=float("-inf"))
        acc += tl.exp(x.to(tl.float64))
    tl.store(sums + row * CHUNKS + part, tl.sum(acc, axis=0))


@triton.jit
def _search(
    log_probs,
    sums,
    uniforms,
    tokens,
    vocab,
    row_stride,
    uniform_stride,
    chunk,
    CHUNKS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    base = log_probs + row.to(tl.int64) * row_stride
    parts = tl.arange(0, CHUNKS)
    part_sums = tl.load(sums + row * CHUNKS + parts)
    cumulative = tl.cumsum(part_sums, axis=0)
    point = tl.load(uniforms + row * uniform_stride) * tl.max(cumulative, axis=0)
    # the first slice whose running sum passes the point (none: rounding at the very top, the last token)
    part = tl.min(tl.where(cumulative > point, parts, CHUNKS), axis=0)
    running = tl.sum(tl.where(parts < part, part_sums, 0.0), axis=0)
    found = vocab - 1
    end = tl.minimum((part + 1) * chunk, vocab)
    for start in range(part * chunk, end, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        p = tl.exp(tl.load(base + offs, mask=offs < end, other=float("-inf")).to(tl.float64))
        hit = (tl.cumsum(p, axis=0) + running > point) & (offs < end)
        found = tl.minimum(found, tl.min(tl.where(hit, offs, vocab - 1), axis=0))
        running += tl.sum(p, axis=0)
    tl.store(tokens + row, found)


def draw(log_probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """:func:`infbench.compression.sampling.draw` for float32 ``log_probs`` ``[rows, vocab]`` on CUDA."""
    rows, vocab = log_probs.shape
    if log_probs.dtype != torch.float32 or log_probs.stride(-1) != 1:
        raise ValueError("the CUDA draw takes float32 log-probs with contiguous rows")
    chunk = -(-vocab // CHUNKS)
    sums = torch.empty((rows, CHUNKS), dtype=torch.float64, device=log_probs.device)
    tokens = torch.empty(rows, dtype=torch.int64, device=log_probs.device)
    uniforms = uniforms.to(torch.float64)
    _slice_sums[(rows, CHUNKS)](log_probs, sums, vocab, log_probs.stride(0), chunk, CHUNKS=CHUNKS, BLOCK=BLOCK)
    _search[(rows,)](
        log_probs,
        sums,
        uniforms,
        tokens,
        vocab,
        log_probs.stride(0),
        uniforms.stride(0),
        chunk,
        CHUNKS=CHUNKS,
        BLOCK=BLOCK,
    )
    return tokens
