"""How far a candidate's next-token distributions are from the source's on a likelihood set: the statistics
llama.cpp's ``llama-perplexity --kl-divergence`` reports (``tools/perplexity/perplexity.cpp``), computed from
the raw logits the candidate answers the scoring requests with. Reported beside ``F``, never judged.

The source's side is written once per set, from the reference scoring's own forward pass: its ``k``
most probable tokens and their log-probs at every scored position (``reference_top.npz``,
:class:`~infbench.compression.likelihood_files.TopLogProbs`; :class:`TopCollector`). Per scored token ``n``
with history ``h_n`` and sampled token ``y_n``:

- ``KL(p || q)`` over the vocabulary, the source's top ``k`` tokens kept apart and the rest of its mass
  merged into one outcome: ``sum_top p_i log(p_i / q_i) + p_rest log(p_rest / q_rest)``. Merging outcomes
  never raises a KL divergence (log-sum inequality), so this is a lower bound of the full-vocabulary value;
  the summary carries the source's mean ``p_rest``, the mass the bound is blind inside of. (llama.cpp
  instead keeps every source log-prob as uint16 over the 16 nats below the top and drops the tokens under
  -16 nats; docs/compression.md compares both on the same model and tokens);
- "same top p": the candidate's most probable token is the source's;
- ``Δp = q(y_n) - p(y_n)``: the change of the sampled token's probability, ``p(y_n)`` from the reference
  scores.

Over the tokens: mean, median, percentiles and maximum of the KL divergence, the mean with a 95% percentile
bootstrap interval resampling whole contexts (as ``F``'s: one context's correlated tokens count once);
top-1 agreement with its interval; Δp's mean, RMS and percentiles (linear interpolation, llama.cpp's rule).
"""

from __future__ import annotations

import numpy as np
import torch

from infbench.compression.likelihood_files import TopLogProbs
from infbench.compression.records import DivergenceSummary

KLD_PERCENTILES = (50, 90, 95, 99, 99.9)
DP_PERCENTILES = (0.1, 1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9)
EXACT_REST = 1e-3
"""Below this candidate mass outside the source's top tokens, it is summed from the logits, not subtracted."""


def _key(q: float) -> str:
    return f"p{q:g}"


def top_log_probs(logits: torch.Tensor, k: int, chunk_rows: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest log-probs of ``logits [..., V]`` (raw) and their token ids, most probable first; a
    few rows at a time in float32."""
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    values = torch.empty(flat.shape[0], k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(flat.shape[0], k, dtype=torch.long, device=logits.device)
    for start in range(0, flat.shape[0], chunk_rows):
        rows = slice(start, start + chunk_rows)
        z = flat[rows].float()
        top = torch.topk(z, k, dim=-1)
        values[rows] = top.values - torch.logsumexp(z, dim=-1, keepdim=True)
        ids[rows] = top.indices
    return values.reshape(*logits.shape[:-1], k), ids.reshape(*logits.shape[:-1], k)


class TopCollector:
    """Keeps the source's top ``k`` of every scored row (an ``observe`` of
    :func:`~infbench.compression.scoring.score_continuations`)."""

    def __init__(self, n: int, m: int, k: int):
        self.top = TopLogProbs(np.empty((n, m, k), dtype=np.int32), np.empty((n, m, k), dtype=np.float32))

    def __call__(self, rows, logits: torch.Tensor) -> None:
        values, ids = top_log_probs(logits, self.top.ids.shape[-1])
        self.top.logprobs[rows], self.top.ids[rows] = values.cpu().numpy(), ids.cpu().numpy()


def token_divergence(
    logits: torch.Tensor, ids: np.ndarray, source_lp: np.ndarray, chunk_rows: int = 16
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per position of the candidate's raw ``logits [b, M, V]`` against the source's top tokens ``ids`` and
    their log-probs ``source_lp`` ``[b, M, k]``: the KL divergence (top ``k`` plus the rest), whether the most
    probable tokens agree, and the source's mass outside its top ``k``. A few positions at a time in float32.
    The candidate's rest is ``1 - sum q_top`` in float64, or, where that is under :data:`EXACT_REST` (the
    subtraction would cancel), the logsumexp of its other logits."""
    vocab, k = logits.shape[-1], ids.shape[-1]
    flat = logits.reshape(-1, vocab)
    top_ids = torch.as_tensor(ids.reshape(-1, k), dtype=torch.long)
    lp = torch.as_tensor(source_lp.reshape(-1, k), dtype=torch.float64)
    lq = torch.empty_like(lp)
    lq_rest = torch.empty(flat.shape[0], dtype=torch.float64)
    same = torch.empty(flat.shape[0], dtype=torch.bool)
    for start in range(0, flat.shape[0], chunk_rows):
        rows = slice(start, start + chunk_rows)
        z = flat[rows].float()
        lse = torch.logsumexp(z, dim=-1, keepdim=True)
        lq[rows] = (z.gather(-1, top_ids[rows]) - lse).double()
        rest = 1 - lq[rows].exp().sum(-1)
        small = rest < EXACT_REST
        if small.any():
            exact = torch.logsumexp(z[small].scatter(-1, top_ids[rows][small], -torch.inf), dim=-1) - lse[small, 0]
            rest[small] = exact.double().exp()
        lq_rest[rows] = rest.clamp(min=torch.finfo(torch.float64).tiny).log()
        # the source's most probable token is among the candidate's (a tie counts: the source's top-k and an
        # argmax order tied logits differently, so the BF16 source scored against itself agreed on 0.984)
        same[rows] = z.gather(-1, top_ids[rows, :1])[:, 0] == z.max(-1).values
    p = lp.exp()
    p_rest = (1 - p.sum(-1)).clamp(min=0)
    rest = torch.zeros_like(p_rest)
    if k < vocab:  # with the whole vocabulary kept, 1 - sum p is rounding
        tiny = torch.finfo(torch.float64).tiny
        rest = torch.where(p_rest > 0, p_rest * (p_rest.clamp(min=tiny).log() - lq_rest), 0.0)
    kl = (p * (lp - lq)).sum(-1) + rest
    shape = logits.shape[:-1]
    return kl.reshape(shape).numpy(), same.reshape(shape).numpy(), p_rest.reshape(shape).numpy()


class Accumulator:
    """Collects :func:`token_divergence` of every scored position (an ``observe`` of
    :func:`infbench.compression.harness.likelihood.teacher_forced`)."""

    def __init__(self, top: TopLogProbs):
        self.top = top
        n, m, _ = top.ids.shape
        self.kl = np.full((n, m), np.nan)
        self.same = np.zeros((n, m), dtype=bool)
        self.p_rest = np.full((n, m), np.nan)

    def __call__(self, rows: np.ndarray, logits: torch.Tensor, at: slice = slice(None)) -> None:
        """``logits [b, positions, V]`` of ``rows`` at the positions ``at``."""
        kl, same, p_rest = token_divergence(logits, self.top.ids[rows, at], self.top.logprobs[rows, at])
        self.kl[rows, at], self.same[rows, at], self.p_rest[rows, at] = kl, same, p_rest

    def summary(
        self, source_lp: np.ndarray, candidate_lp: np.ndarray, *, n_resamples: int, seed: int
    ) -> DivergenceSummary:
        """The statistics; ``source_lp``, ``candidate_lp`` ``[n, M]``: both models' log-probs of the sampled
        tokens."""
        if np.isnan(self.kl).any():
            raise ValueError(f"{int(np.isnan(self.kl).sum())} positions were never scored")
        return summarize(
            self.kl,
            self.same,
            delta_p(source_lp, candidate_lp),
            top_k=self.top.ids.shape[-1],
            p_rest_mean=float(self.p_rest.mean()),
            n_resamples=n_resamples,
            seed=seed,
        )


def delta_p(source_lp: np.ndarray, candidate_lp: np.ndarray) -> np.ndarray:
    """``q(y) - p(y)`` of the sampled tokens."""
    return np.exp(candidate_lp.astype(np.float64)) - np.exp(source_lp.astype(np.float64))


_HUGE = 1e300  # stands for +inf inside the interpolations, which would make inf - inf a NaN


def _percentiles(values: np.ndarray, qs: tuple[float, ...]) -> dict[str, float]:
    """Linear-interpolation percentiles (llama.cpp's rule) where an infinite KL divergence (a candidate
    logit of -inf at a source top token) stays infinite instead of turning the interpolation into NaN."""
    out = np.percentile(np.where(np.isposinf(values), _HUGE, values), qs)
    return {_key(q): float(np.inf if v >= _HUGE / 2 else v) for q, v in zip(qs, out)}


def summarize(
    kl: np.ndarray,
    same: np.ndarray,
    dp: np.ndarray,
    *,
    top_k: int,
    p_rest_mean: float,
    n_resamples: int,
    seed: int,
) -> DivergenceSummary:
    """The statistics of per-token ``kl``, ``same`` (top-1 agreement) and ``dp`` ``[contexts, tokens]``."""
    flat = kl.ravel()
    d = dp.ravel()
    return DivergenceSummary(
        tokens=flat.size,
        top_k=top_k,
        p_rest_mean=p_rest_mean,
        kld_mean=float(flat.mean()),
        kld_mean_ci95=bootstrap_mean(kl, n_resamples, seed),
        kld_percentiles=_percentiles(flat, KLD_PERCENTILES),
        kld_max=float(flat.max()),
        same_top_p=float(same.mean()),
        same_top_p_ci95=bootstrap_mean(same.astype(np.float64), n_resamples, seed),
        dp_mean=float(d.mean()),
        dp_rms=float(np.sqrt(np.mean(d**2))),
        dp_percentiles=_percentiles(d, DP_PERCENTILES),
        dp_min=float(d.min()),
        dp_max=float(d.max()),
    )


def bootstrap_mean(values: np.ndarray, n_resamples: int, seed: int, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values [contexts, tokens]``, resampling contexts."""
    per_context = np.where(np.isposinf(values), _HUGE, values).mean(axis=1, dtype=np.float64)
    rng = np.random.default_rng(seed)
    samples = per_context[rng.integers(0, per_context.size, size=(n_resamples, per_context.size))].mean(axis=1)
    low, high = (
        np.inf if v >= _HUGE / values.size else float(v)
        for v in np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    )
    return low, high
