"""One decode step's attention on CUDA over exactly the cached slots of each row (Triton, split-K).

A new token's query heads of one key/value head attend that head's first ``lengths[b]`` cached slots of row
``b``. The slots are cut into splits of ``SPLIT`` slots; one program per (split, row, key/value head) streams
its slots once (keys and values, ``BLOCK_N`` at a time) and keeps a running softmax for all the group's query
heads together (grouped-query attention reads the cache once, without repeating it), and a second kernel
merges the splits by their log-sum-exp. ``lengths`` is a device tensor, so a CUDA graph captured once serves
every step: the kernels read only the slots that hold tokens, with no mask. Float32 runs the products in
IEEE float32 (no TF32), bf16 and fp16 as flash attention does (probabilities rounded to the input type for
the second product, float32 accumulation).

Imported only on CUDA (Triton ships with PyTorch's CUDA builds).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

SPLIT = 256  # cached slots per program
BLOCK_N = 64  # slots per load


@triton.jit
def _split_attention(q, k, v, lengths, part_out, part_lse, scale, kv_heads, slots, q_row, k_row, v_row,
                     GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, DIM: tl.constexpr, SPLITS: tl.constexpr,
                     SPLIT: tl.constexpr, BLOCK_N: tl.constexpr, IEEE: tl.constexpr):
    split, row = tl.program_id(0), tl.program_id(1)  # row: batch row x key/value head
    length = tl.load(lengths + row // kv_heads)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM)
    n = tl.arange(0, BLOCK_N)
    query = tl.load(q + row.to(tl.int64) * q_row + g[:, None] * DIM + d[None, :], mask=g[:, None] < GROUP,
                    other=0.0)
    keys = k + row.to(tl.int64) * slots * k_row
    values = v + row.to(tl.int64) * slots * v_row
    top = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
    end = tl.minimum((split + 1) * SPLIT, length)
    for start in range(split * SPLIT, end, BLOCK_N):
        valid = start + n < end
        key = tl.load(keys + (start + n)[:, None] * k_row + d[None, :], mask=valid[:, None], other=0.0)
        if IEEE:
            s = tl.dot(query, tl.trans(key), input_precision="ieee")
        else:
            s = tl.dot(query, tl.trans(key))
        s = tl.where(valid[None, :], s * scale, float("-inf"))
        new_top = tl.maximum(top, tl.max(s, axis=1))
        alpha = tl.exp(top - new_top)
        p = tl.exp(s - new_top[:, None])
        total = total * alpha + tl.sum(p, axis=1)
        value = tl.load(values + (start + n)[:, None] * v_row + d[None, :], mask=valid[:, None], other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, value, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(value.dtype), value)
        top = new_top
    part = (row * SPLITS + split).to(tl.int64)
    keep = g < GROUP
    tl.store(part_out + part * GROUP * DIM + g[:, None] * DIM + d[None, :],
             acc / tl.where(total > 0, total, 1.0)[:, None], mask=keep[:, None])
    tl.store(part_lse + part * GROUP + g, tl.where(total > 0, top + tl.log(total), float("-inf")), mask=keep)


@triton.jit
def _merge_splits(part_out, part_lse, out, GROUP: tl.constexpr, DIM: tl.constexpr, SPLITS: tl.constexpr,
                  SPLITS_PAD: tl.constexpr):
    row, head = tl.program_id(0), tl.program_id(1)  # head: one of the group's query heads
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, DIM)
    part = row.to(tl.int64) * SPLITS + s
    lse = tl.load(part_lse + part * GROUP + head, mask=s < SPLITS, other=float("-inf"))
    weight = tl.exp(lse - tl.max(lse, axis=0))
    outs = tl.load(part_out + (part * GROUP + head)[:, None] * DIM + d[None, :], mask=(s < SPLITS)[:, None],
                   other=0.0)
    merged = tl.sum(outs * weight[:, None], axis=0) / tl.sum(weight, axis=0)
    tl.store(out + (row.to(tl.int64) * GROUP + head) * DIM + d, merged.to(out.dtype.element_ty))


def decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, lengths: torch.Tensor,
                     scale: float | None) -> torch.Tensor:
    """``query`` ``[batch, heads, 1, dim]`` against the first ``lengths[b]`` slots of row ``b`` of the cache
    ``key``/``value`` (contiguous ``[batch, kv_heads, slots, dim]``); returns ``[batch, 1, heads, dim]``."""
    batch, heads, _, dim = query.shape
    kv_heads, slots = key.shape[1], key.shape[2]
    group = heads // kv_heads
    if not (key.is_contiguous() and value.is_contiguous()) or dim & (dim - 1) or dim < 16:
        raise ValueError("the decode kernel takes contiguous caches with a power-of-two head size >= 16")
    packed = query.reshape(batch * kv_heads, group, dim)  # query heads h * group ... of key/value head h
    if packed.stride(-1) != 1 or packed.stride(-2) != dim:
        packed = packed.contiguous()
    splits = -(-slots // SPLIT)
    part_out = torch.empty((batch * kv_heads, splits, group, dim), dtype=torch.float32, device=query.device)
    part_lse = torch.empty((batch * kv_heads, splits, group), dtype=torch.float32, device=query.device)
    out = torch.empty((batch, 1, heads, dim), dtype=query.dtype, device=query.device)
    _split_attention[(splits, batch * kv_heads)](
        packed, key, value, lengths, part_out, part_lse, dim**-0.5 if scale is None else scale, kv_heads, slots,
        packed.stride(0), key.stride(2), value.stride(2), GROUP=group, GROUP_PAD=max(16, triton.next_power_of_2(group)),
        DIM=dim, SPLITS=splits, SPLIT=SPLIT, BLOCK_N=BLOCK_N, IEEE=query.dtype == torch.float32)
    _merge_splits[(batch * kv_heads, group)](part_out, part_lse, out, GROUP=group, DIM=dim, SPLITS=splits,
                                             SPLITS_PAD=triton.next_power_of_2(splits))
    return out
