"""The divergence diagnostics (issue 24): KL divergence from the source's top-k log-probs plus the rest of its
mass, top-1 agreement and delta p, against the same quantities computed directly over the whole vocabulary."""

import json

import numpy as np
import pytest
import torch

from infbench.compression import divergence
from infbench.compression.likelihood_files import TopLogProbs


def _pair(vocab: int = 300, positions: int = 24, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Source and candidate logits ``[2, positions / 2, vocab]``: peaked, heavy-tailed rows, the candidate a
    noisy copy of the source."""
    g = torch.Generator().manual_seed(seed)
    source = 4 * torch.randn(2, positions // 2, vocab, generator=g, dtype=torch.float64)
    return source, source + 0.5 * torch.randn(source.shape, generator=g, dtype=torch.float64)


def _exact_kl(source: torch.Tensor, candidate: torch.Tensor) -> np.ndarray:
    lp, lq = torch.log_softmax(source, -1), torch.log_softmax(candidate, -1)
    return (lp.exp() * (lp - lq)).sum(-1).numpy()


def _top(source: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    values, ids = divergence.top_log_probs(source.float(), k)
    return ids.numpy().astype(np.int32), values.numpy()


def test_with_the_whole_vocabulary_kept_it_is_the_kl_divergence():
    source, candidate = _pair()
    ids, lp = _top(source, source.shape[-1])
    kl, same, p_rest = divergence.token_divergence(candidate.float(), ids, lp)
    np.testing.assert_allclose(kl, _exact_kl(source, candidate), rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(same, (source.argmax(-1) == candidate.argmax(-1)).numpy())
    assert np.all(p_rest < 1e-5)


def test_with_the_top_k_and_the_rest_it_is_a_lower_bound_that_tightens_with_k():
    source, candidate = _pair()
    exact = _exact_kl(source, candidate)
    bounds = {k: divergence.token_divergence(candidate.float(), *_top(source, k))[0] for k in (4, 32, 128)}
    for k, kl in bounds.items():
        assert np.all(kl <= exact + 1e-6), k
    gaps = [float(np.mean(exact - bounds[k])) for k in (4, 32, 128)]
    assert gaps[0] > gaps[1] > gaps[2] >= 0


def test_the_summary_is_the_direct_statistics_of_the_tokens():
    """Mean, percentiles and max of the KL divergence, top-1 agreement and delta p, against numpy on the
    directly computed per-token values; the interval of the mean is the bootstrap over contexts."""
    source, candidate = _pair(positions=64)
    accumulated = divergence.Accumulator(TopLogProbs(*_top(source, source.shape[-1])))
    accumulated(np.array([1]), candidate[1:].float())  # rows in any order, as the probes place them
    accumulated(np.array([0]), candidate[:1].float())
    sampled = torch.randint(0, source.shape[-1], source.shape[:-1], generator=torch.Generator().manual_seed(1))
    lp_source = torch.log_softmax(source, -1).gather(-1, sampled[..., None])[..., 0].float().numpy()
    lp_candidate = torch.log_softmax(candidate, -1).gather(-1, sampled[..., None])[..., 0].float().numpy()
    summary = accumulated.summary(lp_source, lp_candidate, n_resamples=500, seed=0)

    kl = _exact_kl(source, candidate).ravel()
    dp = (np.exp(lp_candidate.astype(np.float64)) - np.exp(lp_source.astype(np.float64))).ravel()
    assert summary.tokens == kl.size and summary.top_k == source.shape[-1]
    assert summary.kld_mean == pytest.approx(kl.mean(), rel=1e-4)
    assert summary.kld_percentiles["p50"] == pytest.approx(np.median(kl), rel=1e-4)
    assert summary.kld_percentiles["p99"] == pytest.approx(np.percentile(kl, 99), rel=1e-4)
    assert summary.kld_max == pytest.approx(kl.max(), rel=1e-4)
    assert summary.same_top_p == pytest.approx(np.mean(source.argmax(-1).numpy() == candidate.argmax(-1).numpy()))
    assert summary.dp_percentiles["p1"] == pytest.approx(np.percentile(dp, 1), abs=1e-6)
    assert summary.dp_percentiles["p50"] == pytest.approx(np.median(dp), abs=1e-6)
    assert summary.dp_rms == pytest.approx(np.sqrt(np.mean(dp**2)), rel=1e-5)
    low, high = summary.kld_mean_ci95
    per_context = _exact_kl(source, candidate).mean(axis=1)
    assert per_context.min() - 1e-6 <= low <= summary.kld_mean <= high <= per_context.max() + 1e-6


def test_a_candidate_equal_to_the_source_has_no_divergence():
    source, _ = _pair()
    accumulated = divergence.Accumulator(TopLogProbs(*_top(source, 16)))
    accumulated(np.arange(2), source.float())
    sampled = torch.log_softmax(source, -1)[..., 0].float().numpy()
    summary = accumulated.summary(sampled, sampled, n_resamples=200, seed=0)
    assert summary.kld_max == pytest.approx(0, abs=1e-6) and summary.same_top_p == 1
    assert summary.dp_percentiles == dict.fromkeys(summary.dp_percentiles, 0.0)


def test_the_summary_refuses_positions_never_scored():
    source, _ = _pair()
    accumulated = divergence.Accumulator(TopLogProbs(*_top(source, 8)))
    accumulated(np.array([0]), source[:1].float())
    with pytest.raises(ValueError, match="never scored"):
        accumulated.summary(np.zeros((2, 12)), np.zeros((2, 12)), n_resamples=200, seed=0)


def test_a_candidate_ruling_out_a_source_token_has_an_infinite_divergence_and_a_record_that_round_trips():
    """A -inf logit where the source puts mass: that position's KL divergence is infinite, the percentiles
    above it too (not NaN), and the record stays valid JSON for the verdict and the table."""
    from infbench.compression.records import EvaluationRecord

    source, candidate = _pair(positions=64)
    candidate[0, 0, source[0, 0].argmax()] = -torch.inf
    accumulated = divergence.Accumulator(TopLogProbs(*_top(source, 32)))
    accumulated(np.arange(2), candidate.float())
    lp = np.zeros((2, 32), dtype=np.float32)
    summary = accumulated.summary(lp, lp, n_resamples=200, seed=0)
    assert summary.kld_max == np.inf and summary.kld_mean == np.inf and summary.kld_mean_ci95[1] == np.inf
    assert np.isfinite(summary.kld_percentiles["p50"]) and summary.same_top_p < 1
    record = EvaluationRecord(kind="verification", submission="x", task="", source="s", limit_gib=0, divergence=summary)
    again = EvaluationRecord.model_validate_json(json.dumps(record.model_dump(mode="json")))
    assert again.divergence.kld_max == np.inf


def test_tied_top_logits_count_as_the_same_top_token():
    """The source's top-k and an argmax may order tied logits differently: the BF16 source scored against
    itself agreed on 0.984 of its tokens before ties counted."""
    logits = torch.zeros(1, 4, 8)
    logits[..., 2] = logits[..., 5] = 3.0  # two most probable tokens, tied
    ids, lp = _top(logits, 8)
    ids[..., :2] = ids[..., 1::-1].copy()  # the stored order puts the later of the tied tokens first
    lp[..., :2] = lp[..., 1::-1].copy()
    _, same, _ = divergence.token_divergence(logits, ids, lp)
    assert same.all()
