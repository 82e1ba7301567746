"""``likelihood_above_source``: the likelihood ratio of a candidate against the sampling distribution, on
its samples, stays below ``1 / alpha`` for every causal candidate but a fraction ``alpha`` of the time, and a
look-ahead worth 0.1% of PPL crosses it at the embedded size (32 rows x 256 tokens).

The distributions are a real (tiny, random) Llama's at 512 histories, sharpened so that they are peaked like
a trained model's; tokens are drawn from them exactly, as the sampler does."""

import numpy as np
import pytest
import torch

from infbench.compression.integrity import likelihood_above_source

TRIALS, TOKENS = 2000, 64


@pytest.fixture(scope="module")
def logits(tiny_llama):
    ids = torch.as_tensor(np.random.default_rng(0).integers(0, 97, size=(8, 64)))
    with torch.inference_mode():
        z = tiny_llama(input_ids=ids).logits.double().reshape(-1, 97)
    return 20.0 * z  # peaked: the mean top-1 probability is about 0.3


def _log_softmax(z: torch.Tensor) -> np.ndarray:
    return torch.log_softmax(z.double(), -1).numpy()


def _draw(logp: np.ndarray, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of TOKENS tokens: a history for each token, and the token drawn from ``exp(logp)`` there."""
    where = rng.integers(0, len(logp), size=(n, TOKENS))
    cdf = np.exp(logp).cumsum(-1)
    tokens = (rng.random((n, TOKENS))[..., None] * cdf[where][..., -1:] > cdf[where]).sum(-1)
    return where, tokens


def _fails(sampler: np.ndarray, candidate: np.ndarray, alpha: float) -> bool:
    return not likelihood_above_source(sampler, candidate, temperature=1.0, alpha=alpha).passed


@pytest.mark.parametrize("honest", ["bf16_forward_pass", "noisy_logits", "blunter", "sharper"])
def test_an_honest_causal_candidate_fails_at_most_alpha_of_the_time(logits, honest):
    rng = np.random.default_rng(1)
    p = _log_softmax(logits)
    q = _log_softmax(
        {
            "bf16_forward_pass": logits.bfloat16().double(),
            "noisy_logits": logits + torch.as_tensor(rng.normal(0, 0.3, size=logits.shape)),
            "blunter": 0.7 * logits,
            "sharper": 1.3 * logits,
        }[honest]
    )
    alpha = 0.05
    where, tokens = _draw(p, TRIALS, rng)
    failures = sum(
        _fails(p[where[t], tokens[t]].reshape(1, -1), q[where[t], tokens[t]].reshape(1, -1), alpha)
        for t in range(TRIALS)
    )
    assert failures / TRIALS <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / TRIALS)


def test_a_look_ahead_worth_a_tenth_of_a_percent_fails_at_the_embedded_size(logits):
    rng = np.random.default_rng(2)
    p = _log_softmax(logits)
    where, tokens = _draw(p, 32 * 256 // TOKENS, rng)
    sampler = p[where, tokens].reshape(32, 256)
    check = likelihood_above_source(sampler, sampler + 0.0005, temperature=1.0, alpha=0.001)
    assert check.passed and check.evidence["f_limit"] == pytest.approx(1.00084, abs=1e-5)
    honest = likelihood_above_source(sampler, sampler, temperature=1.0, alpha=0.001)
    assert honest.passed and honest.evidence["log_likelihood_ratio"] == 0.0
    # the source's own distribution plus a bonus on the token it is asked to predict: F = 1.001
    bonus = 0.0012
    peeked = np.log(np.exp(sampler + bonus) / (1 - np.exp(sampler) + np.exp(sampler + bonus)))
    check = likelihood_above_source(sampler, peeked, temperature=1.0, alpha=0.001)
    assert 1.001 <= check.evidence["f_vs_source_samples"] < 1.0012
    assert not check.passed and check.evidence["log_likelihood_ratio"] > check.evidence["limit"] == np.log(1000)
    tempered = likelihood_above_source(sampler, peeked, temperature=0.7, alpha=0.001)
    assert tempered.passed and tempered.evidence["applies"] is False
