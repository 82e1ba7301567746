"""Continuation sampling by the BF16 source (PROTOCOL A3).

Each context gets ``M`` tokens sampled at temperature ``T`` with no top-k or
top-p, EOS not stopping the continuation. Every context has its own random
stream: ``M`` float64 uniforms from NumPy's generator seeded by the base seed,
the set and the context index, one per token, and the token is the inverse
CDF of ``softmax(z / T)`` (float64 cumulative sum over the vocabulary in
token-id order) at that uniform, an exact draw. So a context's continuation
does not depend on which other contexts share its batch, nor on the device
(up to the floating-point effects of batching and kernels on the logits).
The stored log-prob of each token is the source's own, ``log_softmax(z)`` of
the raw logits.

Backends: ``transformers`` (CPU or CUDA; ``batched_decoding`` with a static
cache, and CUDA graphs on CUDA) and ``vllm`` (:func:`sample_causal` over vLLM's logits, in the vLLM
environment: :mod:`infbench.compression.vllm_likelihood`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from infbench.bf16_on_cpu import float32_weights_held
from infbench.compression import batched_decoding
from infbench.seeding import derive_seed


@dataclass(frozen=True)
class Samples:
    tokens: np.ndarray  # [n, M] int32
    logprobs: np.ndarray  # [n, M] float32, the source's own log-probs


def context_seed(seed: int, set_name: str, index: int) -> int:
    return derive_seed(seed, "continuation", set_name, index)


def context_uniforms(seed: int, set_name: str, indices: list[int], n_tokens: int) -> np.ndarray:
    """``[len(indices), n_tokens]`` float64 uniforms in [0, 1), row ``i`` from context ``indices[i]``'s stream."""
    return np.stack([np.random.default_rng(context_seed(seed, set_name, i)).random(n_tokens) for i in indices])


def draw(log_probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row from ``softmax(log_probs)``: the first token whose cumulative probability exceeds
    ``uniforms[i]`` times the row's total (a zero-probability token is never drawn). Float32 log-probs on CUDA
    take :mod:`infbench.compression.cuda_draw` (the same arithmetic without float64 copies)."""
    if log_probs.is_cuda and log_probs.dtype == torch.float32:
        from infbench.compression import cuda_draw

        return cuda_draw.draw(log_probs, uniforms)
    cdf = log_probs.double().exp().cumsum(-1)
    point = (uniforms.to(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, point, right=True).squeeze(-1).clamp_max(log_probs.shape[-1] - 1)


def _next_token(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float):
    logp = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    scaled = logp if temperature == 1.0 else torch.log_softmax(logits.float() / temperature, dim=-1)
    token = draw(scaled, uniforms)
    return token, logp.gather(-1, token.unsqueeze(-1)).squeeze(-1)


def batch_rows(model, n: int, context_len: int, max_len: int, batch_size: int | None) -> int:
    """``batch_size``, or with None the rows of the fewest batches that fit in the free memory of the model's
    CUDA device (PyTorch's cached blocks included), split evenly: 256 rows where 222 fit go as 2 x 128."""
    device = next(model.parameters()).device
    if batch_size is not None:
        return batch_size
    if device.type != "cuda":
        raise ValueError("a sampling batch size chosen by memory needs a CUDA device")
    free = batched_decoding.free_device_bytes(device)
    fit = batched_decoding.rows_that_fit(model, context_len, max_len, free)
    return even_rows(n, fit)


def even_rows(n: int, fit: int) -> int:
    """Rows per batch of the fewest batches of at most ``fit`` rows that hold ``n``, as equal as slices
    allow."""
    batches = -(-n // max(1, fit))
    return -(-n // batches)


@torch.inference_mode()
def sample_transformers(
    model,
    contexts: np.ndarray,
    indices: list[int],
    *,
    set_name: str,
    n_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int | None,
    progress: bool = True,
    kv_window: int = 256,
    cuda_graphs: bool = True,
) -> Samples:
    device = next(model.parameters()).device
    n, context_len = contexts.shape
    max_len = context_len + n_tokens
    uniforms = context_uniforms(seed, set_name, indices, n_tokens)
    rows_per_batch = batch_rows(model, n, context_len, max_len, batch_size)
    tokens = np.empty((n, n_tokens), dtype=np.int32)
    logprobs = np.empty((n, n_tokens), dtype=np.float32)
    bar = tqdm(total=n * n_tokens, desc=f"sample {set_name}", unit="tok", disable=not progress)
    with float32_weights_held(model):  # on a CPU without BF16 instructions (infbench.bf16_on_cpu)
        for start in range(0, n, rows_per_batch):
            rows = slice(start, min(n, start + rows_per_batch))
            b = rows.stop - rows.start
            u = torch.as_tensor(uniforms[rows], device=device)
            out_tokens = torch.empty((b, n_tokens), dtype=torch.long, device=device)
            out_logprobs = torch.empty((b, n_tokens), dtype=torch.float32, device=device)
            dec = batched_decoding.decoder(model, b, max_len, window=kv_window, cuda_graphs=cuda_graphs)
            try:
                logits = dec.prefill(torch.as_tensor(contexts[rows], dtype=torch.long, device=device))
                for step in range(n_tokens):
                    out_tokens[:, step], out_logprobs[:, step] = _next_token(logits, u[:, step], temperature)
                    if step + 1 < n_tokens:
                        logits = dec.step(out_tokens[:, step])
                    bar.update(b)
            finally:
                dec.close()
            tokens[rows] = out_tokens.cpu().numpy()
            logprobs[rows] = out_logprobs.cpu().numpy()
    bar.close()
    return Samples(tokens, logprobs)


@torch.inference_mode()
def sample_causal(
    runner,
    contexts: np.ndarray,
    indices: list[int],
    *,
    set_name: str,
    n_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int,
    progress: bool = True,
) -> Samples:
    """The same draw from a runner of the causal package interface (:mod:`infbench.compression.package_api`:
    ``prefill``, ``step``, ``release``): the ``vllm`` backend (:mod:`infbench.compression.vllm_likelihood`). The
    runner computes logits only; every token is drawn here from its context's uniforms."""
    n = len(contexts)
    uniforms = context_uniforms(seed, set_name, indices, n_tokens)
    tokens = np.empty((n, n_tokens), dtype=np.int32)
    logprobs = np.empty((n, n_tokens), dtype=np.float32)
    bar = tqdm(total=n * n_tokens, desc=f"sample {set_name}", unit="tok", disable=not progress)
    for start in range(0, n, batch_size):
        rows = np.arange(start, min(n, start + batch_size))
        live = np.arange(len(rows))
        logits = torch.as_tensor(runner.prefill([np.asarray(contexts[r], dtype=np.int64) for r in rows], n_tokens))
        for step in range(n_tokens):
            u = torch.as_tensor(uniforms[rows, step], device=logits.device)
            token, logprob = _next_token(logits, u, temperature)
            tokens[rows, step], logprobs[rows, step] = token.cpu().numpy(), logprob.cpu().numpy()
            if step + 1 < n_tokens:
                logits = torch.as_tensor(runner.step(token.cpu().numpy().astype(np.int64), live))
            bar.update(len(rows))
        runner.release()
    bar.close()
    return Samples(tokens, logprobs)
