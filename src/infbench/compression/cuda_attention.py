"""One decode step's attention on CUDA over exactly the cached slots of each row (Triton, split-K).

A new token's query heads of one key/value head attend that head's first ``lengths[b]`` cached slots of row
``b``. One program per (split, row, key/value head) streams its slots once (keys and values, ``BLOCK_N`` at a
time) and keeps a running softmax for all the group's query heads together (grouped-query attention reads the
cache once, without repeating it). When the rows alone fill the device (256 rows of 8 key/value heads) each
row is one split and the program writes the output; otherwise the slots are cut into splits and a second
kernel merges them by their log-sum-exp. ``lengths`` is a device tensor, so a CUDA graph captured once serves
every step: the kernels read only the slots that hold tokens, with no mask. Float32 runs the products in
IEEE float32 (no TF32), bf16 and fp16 as flash attention does (probabilities rounded to the input type for
the second product, float32 accumulation).

Imported only on CUDA (Triton ships with PyTorch's CUDA builds).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_N = 64  # slots per load
MIN_SPLIT = 256  # the fewest slots a split takes
PROGRAMS_PER_SM = 4  # programs per multiprocessor that fill the device (measured on the H200, docs/gpu.md)


@triton.jit(do_not_specialize=["kv_heads", "slots", "split_len"])
def _split_attention(
    q,
    k,
    v,
    lengths,
    out,
    part_out,
    part_lse,
    scale,
    kv_heads,
    slots,
    split_len,
    q_row,
    k_row,
    v_row,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE: tl.constexpr,
    DIRECT: tl.constexpr,
):
    split, row = tl.program_id(0), tl.program_id(1)  # row: batch row x key/value head
    length = tl.load(lengths + row // kv_heads)
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM)
    n = tl.arange(0, BLOCK_N)
    query = tl.load(q + row.to(tl.int64) * q_row + g[:, None] * DIM + d[None, :], mask=g[:, None] < GROUP, other=0.0)
    keys = k + row.to(tl.int64) * slots * k_row
    values = v + row.to(tl.int64) * slots * v_row
    top = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    total = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, DIM], tl.float32)
    end = tl.minimum((split + 1) * split_len, length)
    for start in range(split * split_len, end, BLOCK_N):
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
    keep = g < GROUP
    mean = acc / tl.where(total > 0, total, 1.0)[:, None]
    if DIRECT:  # the row's only split: the output, heads h * group ... of key/value head h in order
        tl.store(
            out + (row.to(tl.int64) * GROUP + g[:, None]) * DIM + d[None, :],
            mean.to(out.dtype.element_ty),
            mask=keep[:, None],
        )
    else:
        part = (row * tl.num_programs(0) + split).to(tl.int64)
        tl.store(part_out + (part * GROUP + g[:, None]) * DIM + d[None, :], mean, mask=keep[:, None])
        lse = tl.where(total > 0, top + tl.log(total), float("-inf"))
        tl.store(part_lse + part * GROUP + g, lse, mask=keep)


@triton.jit
def _merge_splits(
    part_out, part_lse, out, GROUP: tl.constexpr, DIM: tl.constexpr, SPLITS: tl.constexpr, SPLITS_PAD: tl.constexpr
):
    row, head = tl.program_id(0), tl.program_id(1)  # head: one of the group's query heads
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, DIM)
    part = row.to(tl.int64) * SPLITS + s
    lse = tl.load(part_lse + part * GROUP + head, mask=s < SPLITS, other=float("-inf"))
    weight = tl.exp(lse - tl.max(lse, axis=0))
    outs = tl.load(part_out + (part * GROUP + head)[:, None] * DIM + d[None, :], mask=(s < SPLITS)[:, None], other=0.0)
    merged = tl.sum(outs * weight[:, None], axis=0) / tl.sum(weight, axis=0)
    tl.store(out + (row.to(tl.int64) * GROUP + head) * DIM + d, merged.to(out.dtype.element_ty))


def split_count(rows: int, slots: int, device: torch.device) -> int:
    """Splits per row: one when ``rows`` programs fill the device, else as many as fill it (of at least
    ``MIN_SPLIT`` slots each)."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(-(-PROGRAMS_PER_SM * sms // rows), -(-slots // MIN_SPLIT)))


def decode_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    lengths: torch.Tensor,
    scale: float | None,
    splits: int | None = None,
) -> torch.Tensor:
    """``query`` ``[batch, heads, 1, dim]`` against the first ``lengths[b]`` slots of row ``b`` of the cache
    ``key``/``value`` (contiguous ``[batch, kv_heads, slots, dim]``); returns ``[batch, 1, heads, dim]``.
    ``splits``: per row (default :func:`split_count`)."""
    batch, heads, _, dim = query.shape
    kv_heads, slots = key.shape[1], key.shape[2]
    group = heads // kv_heads
    if not (key.is_contiguous() and value.is_contiguous()) or dim & (dim - 1) or dim < 16:
        raise ValueError("the decode kernel takes contiguous caches with a power-of-two head size >= 16")
    packed = query.reshape(batch * kv_heads, group, dim)  # query heads h * group ... of key/value head h
    if packed.stride(-1) != 1 or packed.stride(-2) != dim:
        packed = packed.contiguous()
    rows = batch * kv_heads
    splits = splits or split_count(rows, slots, query.device)
    split_len = -(-slots // splits // BLOCK_N) * BLOCK_N
    splits = -(-slots // split_len)
    out = torch.empty((batch, 1, heads, dim), dtype=query.dtype, device=query.device)
    # the splits' outputs and log-sum-exps (one element, unused, when each row is one split)
    part_out = torch.empty((rows, splits, group, dim) if splits > 1 else 1, dtype=torch.float32, device=query.device)
    part_lse = torch.empty((rows, splits, group) if splits > 1 else 1, dtype=torch.float32, device=query.device)
    _split_attention[(splits, rows)](
        packed,
        key,
        value,
        lengths,
        out,
        part_out,
        part_lse,
        dim**-0.5 if scale is None else scale,
        kv_heads,
        slots,
        split_len,
        packed.stride(0),
        key.stride(2),
        value.stride(2),
        GROUP=group,
        GROUP_PAD=max(16, triton.next_power_of_2(group)),
        DIM=dim,
        BLOCK_N=BLOCK_N,
        IEEE=query.dtype == torch.float32,
        DIRECT=splits == 1,
        num_warps=4,
        num_stages=3 if dim <= 128 else 2,
    )
    if splits > 1:
        _merge_splits[(rows, group)](
            part_out, part_lse, out, GROUP=group, DIM=dim, SPLITS=splits, SPLITS_PAD=triton.next_power_of_2(splits)
        )
    return out
