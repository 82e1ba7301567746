"""Teacher-forced likelihood of sampled continuations (PROTOCOL A3).

The scorer takes any model as a *logits function*: ``logits_fn(input_ids,
n_last)`` returns the raw (unscaled) logits of the last ``n_last`` positions,
shape ``[batch, n_last, vocab]``. Scoring a continuation ``y`` after context
``x`` feeds ``x + y[:-1]`` and reads log-softmax of the raw logits at exactly
the sampled tokens (what lm-evaluation-harness does), so the probabilities
always come from the model's own forward pass.

Statistics: ``H = -mean log q(y_n | h_n)``, ``PPL = exp(H)``,
``F = PPL(p) / PPL(q) = exp(H_p - H_q)``; beyond the paper, per-token
``KL(p || q)`` and top-1 agreement when both models' logits are at hand, and a
percentile-bootstrap 95% interval for ``F`` over contexts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm


class LogitsFn(Protocol):
    def __call__(self, input_ids: torch.Tensor, n_last: int) -> torch.Tensor: ...


def _teacher_forced_inputs(contexts: np.ndarray, continuations: np.ndarray, device) -> torch.Tensor:
    ids = np.concatenate([contexts, continuations[:, :-1]], axis=1)
    return torch.as_tensor(ids, dtype=torch.long, device=device)


def _log_probs(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.float(), dim=-1)


def target_log_probs(logits: torch.Tensor, target: torch.Tensor, chunk_rows: int = 16) -> torch.Tensor:
    """``log_softmax(logits)[target]`` in float32, ``logits [..., V]``, ``target [...]``.

    Computed as ``z[y] - logsumexp(z)`` with ``z`` the logits in float32, never writing out the
    full-vocabulary log-softmax. On CUDA one compiled kernel reads the logits in their own dtype and reduces
    in float32 (a loop of small kernels would leave the GPU idle); on the CPU a few rows at a time, so each
    float32 copy stays in cache (4x faster than ``log_softmax(z.float()).gather``).
    """
    if logits.device.type == "cuda":
        return _fused_target_log_probs()(logits, target)
    vocab = logits.shape[-1]
    flat, flat_target = logits.reshape(-1, vocab), target.reshape(-1, 1)
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], chunk_rows):
        rows = slice(start, start + chunk_rows)
        out[rows] = _target_minus_logsumexp(flat[rows], flat_target[rows].squeeze(-1))
    return out.reshape(target.shape)


def _target_minus_logsumexp(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    z = logits.float()
    return z.gather(-1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)


@functools.cache
def _fused_target_log_probs():
    return torch.compile(_target_minus_logsumexp, dynamic=True)


def _batches(n: int, batch_size: int):
    for start in range(0, n, batch_size):
        yield slice(start, min(n, start + batch_size))


@torch.inference_mode()
def score_continuations(
    logits_fn: LogitsFn,
    contexts: np.ndarray,
    continuations: np.ndarray,
    *,
    batch_size: int,
    device="cpu",
    progress: bool = True,
    observe: Callable[[slice, torch.Tensor], None] | None = None,
) -> np.ndarray:
    """Log-probs ``[n_contexts, n_continuation]`` of exactly the sampled tokens; ``observe(rows, logits)``
    sees the raw logits of every batch (the source's top log-probs, :class:`divergence.TopCollector`)."""
    n, m = continuations.shape
    out = np.empty((n, m), dtype=np.float32)
    for rows in tqdm(list(_batches(n, batch_size)), desc="score", unit="batch", disable=not progress):
        inputs = _teacher_forced_inputs(contexts[rows], continuations[rows], device)
        logits = logits_fn(inputs, m)
        target = torch.as_tensor(continuations[rows], dtype=torch.long, device=logits.device)
        out[rows] = target_log_probs(logits, target).cpu().numpy()
        if observe is not None:
            observe(rows, logits)
    return out


@dataclass(frozen=True)
class PairScores:
    """Per-token statistics of candidate ``q`` against reference ``p``."""

    logprobs_p: np.ndarray
    logprobs_q: np.ndarray
    kl: np.ndarray
    top1_agree: np.ndarray


@torch.inference_mode()
def score_pair(
    logits_p: LogitsFn,
    logits_q: LogitsFn,
    contexts: np.ndarray,
    continuations: np.ndarray,
    *,
    batch_size: int,
    device="cpu",
    progress: bool = True,
) -> PairScores:
    """Both models' log-probs of the sampled tokens, per-token KL(p||q) and top-1 agreement."""
    n, m = continuations.shape
    arrays = {k: np.empty((n, m), dtype=np.float32) for k in ("p", "q", "kl")}
    top1 = np.empty((n, m), dtype=bool)
    for rows in tqdm(list(_batches(n, batch_size)), desc="score pair", unit="batch", disable=not progress):
        inputs = _teacher_forced_inputs(contexts[rows], continuations[rows], device)
        lp = _log_probs(logits_p(inputs, m))
        lq = _log_probs(logits_q(inputs, m)).to(lp.device)
        target = torch.as_tensor(continuations[rows], dtype=torch.long, device=lp.device).unsqueeze(-1)
        arrays["p"][rows] = lp.gather(-1, target).squeeze(-1).cpu().numpy()
        arrays["q"][rows] = lq.gather(-1, target).squeeze(-1).cpu().numpy()
        arrays["kl"][rows] = (lp.exp() * (lp - lq)).sum(-1).cpu().numpy()
        top1[rows] = (lp.argmax(-1) == lq.argmax(-1)).cpu().numpy()
    return PairScores(arrays["p"], arrays["q"], arrays["kl"], top1)


def cross_entropy(logprobs: np.ndarray) -> float:
    """``H = -(1/N) sum log q(y_n | h_n)`` in nats, accumulated in float64."""
    return float(-np.mean(logprobs, dtype=np.float64))


def perplexity(logprobs: np.ndarray) -> float:
    return float(np.exp(cross_entropy(logprobs)))


def ppl_ratio(logprobs_p: np.ndarray, logprobs_q: np.ndarray) -> float:
    """``F = PPL(p) / PPL(q) = exp(H_p - H_q)``; 1 when equal, below 1 when q is worse."""
    return float(np.exp(cross_entropy(logprobs_p) - cross_entropy(logprobs_q)))


def bootstrap_ppl_ratio(
    logprobs_p: np.ndarray, logprobs_q: np.ndarray, *, n_resamples: int, seed: int, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``F`` resampling whole contexts (rows)."""
    per_ctx = np.mean(logprobs_q, axis=1, dtype=np.float64) - np.mean(logprobs_p, axis=1, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, per_ctx.shape[0], size=(n_resamples, per_ctx.shape[0]))
    samples = np.exp(per_ctx[idx].mean(axis=1))
    lo, hi = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def hf_logits_fn(model) -> Callable[[torch.Tensor, int], torch.Tensor]:
    """Logits function of a transformers causal LM (only the last ``n_last`` positions go through the head)."""

    def logits_fn(input_ids: torch.Tensor, n_last: int) -> torch.Tensor:
        return model(input_ids=input_ids, logits_to_keep=n_last, use_cache=False).logits

    return logits_fn
