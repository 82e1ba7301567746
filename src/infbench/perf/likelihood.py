"""Scorer throughput vs a bare batched forward pass, and sampling throughput, against the device's ceilings.

The bare forward pass is ``model(ids).logits`` on exactly the token batches the scorer feeds (context +
continuation[:-1]); the scorer adds the log-softmax and the gather of the sampled tokens but only sends the
continuation positions through the output head (``logits_to_keep``). Goal: scorer >= 95% of bare.

The ceilings are measured on the same device: the bf16 matrix-product rate (a square product) and the copy
bandwidth (a device-to-device copy, bytes read plus written). Model FLOP utilization (MFU) is the forward
pass's matrix-product FLOPs (``roofline.forward_flops``) over its time, over that rate. Sampling runs the
pipeline's sampler at the given shape (on CUDA the batch is chosen by memory) and is compared with the
roofline bound of that batch: the prefill at the matmul rate plus every decode step's weights and KV cache at
the copy bandwidth.

Models: a checkpoint directory, or ``random:<name>`` (``RANDOM_MODELS``), built from a config with random
weights (no hub needed).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pandas as pd
import torch

from infbench import atomic
from infbench.compression import sampling, scoring
from infbench.device import resolve
from infbench.hf_loading import load_causal_lm
from infbench.perf import decode_profile, roofline

RANDOM_MODELS = {
    # Llama 3.2 1B's shape: 1.24B parameters, tied embedding
    "llama-1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=True,
        rope_theta=500000.0,
        max_position_embeddings=4096,
    ),
    # Llama 3.1 8B's shape: 8.03B parameters, untied embedding
    "llama-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=128256,
        tie_word_embeddings=False,
        rope_theta=500000.0,
        max_position_embeddings=4096,
    ),
    # SmolLM2-135M's shape (the embedded source)
    "smollm2-135m": dict(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=49152,
        tie_word_embeddings=True,
        rope_theta=100000.0,
        max_position_embeddings=8192,
    ),
}


def load_model(spec: str, dtype: str, device: str):
    if not spec.startswith("random:"):
        return load_causal_lm(spec, dtype, device)
    from transformers import LlamaConfig, LlamaForCausalLM

    name = spec.removeprefix("random:")
    if name not in RANDOM_MODELS:
        raise ValueError(f"unknown random model '{name}' (known: {', '.join(RANDOM_MODELS)})")
    torch.manual_seed(0)
    with torch.device(resolve(device)):
        model = LlamaForCausalLM(LlamaConfig(**RANDOM_MODELS[name])).to(getattr(torch, dtype))
    return model.eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_s(device: torch.device, repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def ceilings(device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    """Measured bf16 matmul FLOP/s (n x n x n) and copy bytes/s (read + written), median of repeats."""
    n, copy_bytes, repeats = (8192, 2**31, 20) if device.type == "cuda" else (1024, 2**28, 5)
    a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
    src = torch.randn(copy_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        a @ b, dst.copy_(src)
    t_mm = _median_s(device, repeats, lambda: a @ b)
    t_copy = _median_s(device, repeats, lambda: dst.copy_(src))
    return {"matmul_flops_per_s": 2 * n**3 / t_mm, "copy_bytes_per_s": 2 * copy_bytes / t_copy}


def _scorer_rows(model, shape, device, ctx, cont, batch_size: int, repeats: int, matmul: float) -> list[dict]:
    contexts, length = ctx.shape[0], ctx.shape[1] + cont.shape[1] - 1

    @torch.inference_mode()
    def bare():
        for start in range(0, contexts, batch_size):
            ids = np.concatenate([ctx[start : start + batch_size], cont[start : start + batch_size, :-1]], axis=1)
            _ = model(input_ids=torch.as_tensor(ids, dtype=torch.long, device=device), use_cache=False).logits

    def scorer():
        scoring.score_continuations(
            scoring.hf_logits_fn(model), ctx, cont, batch_size=batch_size, device=device, progress=False
        )

    bare(), scorer()  # warm-up (and, on CUDA, the scorer's kernel compilation)
    rows = []
    for what, fn, head in (("bare forward", bare, length), ("scorer", scorer, cont.shape[1])):
        seconds = _median_s(device, repeats, fn)
        flops = sum(
            roofline.forward_flops(shape, min(batch_size, contexts - s), length, head)
            for s in range(0, contexts, batch_size)
        )
        rows.append(
            {
                "what": f"{what}, batch {batch_size}",
                "tokens": contexts * length,
                "seconds": seconds,
                "tokens_per_s": contexts * length / seconds,
                "mfu": flops / seconds / matmul,
            }
        )
    rows[1]["vs"] = rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]
    return rows


def logprob_agreement(model, device, ctx, cont, rows: int = 2) -> float:
    """Max |difference| of the device's scorer and the CPU scorer's arithmetic on the same logits."""
    with torch.inference_mode():
        ids = torch.as_tensor(np.concatenate([ctx[:rows], cont[:rows, :-1]], axis=1), dtype=torch.long, device=device)
        logits = scoring.hf_logits_fn(model)(ids, cont.shape[1])
        target = torch.as_tensor(cont[:rows], dtype=torch.long, device=device)
        here = scoring.target_log_probs(logits, target).cpu()
        cpu = scoring.target_log_probs(logits.cpu(), target.cpu())
    return float((here - cpu).abs().max())


def _sampling_row(
    model, shape, device, ctx, n_tokens: int, batch_size: int | None, cuda_graphs: bool, peaks: dict[str, float]
) -> dict:
    n = ctx.shape[0]
    batch = sampling.batch_rows(model, n, ctx.shape[1], ctx.shape[1] + n_tokens, batch_size)

    def sample(rows: int, tokens: int):
        sampling.sample_transformers(
            model,
            ctx[:rows],
            list(range(rows)),
            set_name="bench",
            n_tokens=tokens,
            temperature=1.0,
            seed=0,
            batch_size=batch,
            progress=False,
            cuda_graphs=cuda_graphs,
        )

    warm_up = _median_s(device, 1, lambda: sample(min(n, batch), 16))  # kernel compilation, plans
    seconds = _median_s(device, 1, lambda: sample(n, n_tokens))
    bound = sum(
        roofline.sampling_bound_s(shape, min(batch, n - s), ctx.shape[1], n_tokens, **peaks) for s in range(0, n, batch)
    )
    graphs = " + CUDA graphs" if cuda_graphs and device.type == "cuda" else ""
    return {
        "what": f"sampling{graphs}, batch {batch} (new tokens)",
        "tokens": n * n_tokens,
        "seconds": seconds,
        "tokens_per_s": n * n_tokens / seconds,
        "vs": bound / seconds,
        "warm_up_s": warm_up,
    }


def run(
    model_spec: str,
    *,
    contexts: int,
    context_tokens: int,
    continuation_tokens: int,
    batch_sizes: list[int],
    sample_contexts: int,
    sample_batch_size: int | None,
    dtype: str,
    repeats: int,
    device: str = "auto",
    threads: int | None = None,
    eager: bool = True,
    profile_cached: int | None = None,
    out_md: str | None = None,
) -> str:
    """The table (Markdown); ``batch_sizes`` empty: no scorer rows; ``eager``: also sample without CUDA
    graphs; ``profile_cached``: also profile a decode step at that cache length (:mod:`decode_profile`)."""
    if threads:
        torch.set_num_threads(threads)
    model = load_model(model_spec, dtype, device)
    dev = next(model.parameters()).device
    shape = roofline.Shape.of(model)
    peaks = ceilings(dev, getattr(torch, dtype))
    if sample_batch_size is None and dev.type != "cuda":
        sample_batch_size = max(batch_sizes, default=8)
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, shape.vocab, size=(max(contexts, sample_contexts), context_tokens), dtype=np.int32)
    cont = rng.integers(0, shape.vocab, size=(contexts, continuation_tokens), dtype=np.int32)
    rows = []
    for batch_size in batch_sizes:
        rows += _scorer_rows(model, shape, dev, ctx[:contexts], cont, batch_size, repeats, peaks["matmul_flops_per_s"])
        print(rows[-2], rows[-1], sep="\n", flush=True)
    for graphs in [True, False][: 2 if eager else 1] if dev.type == "cuda" else [False]:
        rows.append(
            _sampling_row(
                model, shape, dev, ctx[:sample_contexts], continuation_tokens, sample_batch_size, graphs, peaks
            )
        )
        print(rows[-1], flush=True)
    max_diff = logprob_agreement(model, dev, ctx, cont)
    n_params = sum(p.numel() for p in model.parameters())
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    text = (
        f"model {model_spec} ({n_params / 1e9:.3f}B parameters, {dtype}) on {name}; torch {torch.__version__}\n"
        f"measured ceilings: matmul {peaks['matmul_flops_per_s'] / 1e12:.4g} TFLOP/s, "
        f"copy {peaks['copy_bytes_per_s'] / 1e12:.3f} TB/s (read + written)\n"
        f"scorer: {contexts} contexts x ({context_tokens} + {continuation_tokens}) tokens, median of {repeats}; "
        f"sampling: {sample_contexts} contexts x {context_tokens} + {continuation_tokens} new tokens, once\n\n"
        + pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3f")
        + "\n\nvs: scorer rows, throughput / bare forward at the same batch (goal >= 0.95); sampling rows, "
        "roofline bound / measured time, after a 16-token warm-up of the same batch (kernel "
        "compilation; goal >= 0.5 at Llama 3.2 1B's shape, >= 0.7 at Llama 3.1 8B's). "
        "mfu: matrix-product FLOPs / time / matmul ceiling.\n"
        + f"scorer log-probs vs the CPU arithmetic on the same logits: max |diff| {max_diff:.2e}\n"
    )
    if profile_cached is not None:
        batch = sampling.batch_rows(
            model, sample_contexts, context_tokens, context_tokens + continuation_tokens, sample_batch_size
        )
        table = decode_profile.profile(
            model, batch=batch, cached=profile_cached, copy_bytes_per_s=peaks["copy_bytes_per_s"]
        )
        text += (
            f"\nOne decode step at batch {batch} with {profile_cached} cached tokens, ms (median of 20; "
            f"kernels: torch.profiler, per step):\n\n" + table.to_markdown(index=False, floatfmt=".3f") + "\n"
        )
    if out_md:
        atomic.write_text(out_md, text)
    return text
