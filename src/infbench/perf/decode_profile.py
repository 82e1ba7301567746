"""Where a sampling step's time goes: the decode step (a CUDA graph's replay on CUDA) and the draw, each timed
alone, and the step's kernels by kind (torch.profiler), against the step's bandwidth bound.

The batch is prefilled with ``cached`` random tokens, so every profiled step reads a cache of about that
length.
Kinds, by kernel name: attention (flash, cuDNN, memory-efficient kernels), matmul (cuBLAS, CUTLASS), and
everything else (normalisation, rotary embedding, activations, copies: elementwise work).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd
import torch

from infbench.compression import batched_decoding, sampling
from infbench.perf import roofline

KINDS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn", "mem_eff")),
    ("matmul", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "splitk")),
)


def kind(kernel: str) -> str:
    name = kernel.lower()
    return next((k for k, marks in KINDS if any(m in name for m in marks)), "elementwise and other")


def _median_ms(device: torch.device, fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


@torch.inference_mode()
def profile(
    model, *, batch: int, cached: int, copy_bytes_per_s: float, steps: int = 20, cuda_graphs: bool = True
) -> pd.DataFrame:
    """Milliseconds per step: the decode step, the draw, the step's kernels by kind, and the bound."""
    device = next(model.parameters()).device
    shape = roofline.Shape.of(model)
    ids = np.random.default_rng(0).integers(0, shape.vocab, size=(batch, cached))
    dec = batched_decoding.decoder(model, batch, cached + 3 * steps + 2, window=256, cuda_graphs=cuda_graphs)
    try:
        logits = dec.prefill(torch.as_tensor(ids, dtype=torch.long, device=device))
        uniforms = torch.rand(batch, dtype=torch.float64, device=device)
        token, _ = sampling._next_token(logits, uniforms, 1.0)
        for _ in range(2):  # the eager first step and the graph's capture
            dec.step(token)
        step_ms = _median_ms(device, lambda: dec.step(token), steps)
        draw_ms = _median_ms(device, lambda: sampling._next_token(logits, uniforms, 1.0), steps)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                dec.step(token)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    finally:
        dec.close()
    by_kind: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            ms = event.device_time_total / 1e3 / steps
            by_kind[kind(event.name)] = by_kind.get(kind(event.name), 0.0) + ms
    bound_ms = roofline.decode_step_bytes(shape, batch, cached) / copy_bytes_per_s * 1e3
    attention_bytes = batch * cached * shape.kv_bytes_per_token
    rows = [
        {"what": "decode step", "ms": step_ms, "bound_ms": bound_ms},
        *(
            {
                "what": f"  kernels: {k}",
                "ms": ms,
                "bound_ms": attention_bytes / copy_bytes_per_s * 1e3 if k == "attention" else None,
            }
            for k, ms in sorted(by_kind.items())
        ),
        {"what": "draw (log-softmax, inverse CDF, gather)", "ms": draw_ms, "bound_ms": None},
    ]
    return pd.DataFrame(rows)
