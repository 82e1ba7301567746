import math

import numpy as np
import pytest
import torch

from infbench.compression import sampling, scoring


def test_uniform_logits_give_log_vocab_cross_entropy():
    vocab = 50

    def uniform(ids, n_last):
        return torch.zeros(ids.shape[0], n_last, vocab)

    ctx = np.zeros((3, 4), dtype=np.int32)
    cont = np.random.default_rng(0).integers(0, vocab, size=(3, 6)).astype(np.int32)
    lp = scoring.score_continuations(uniform, ctx, cont, batch_size=2, progress=False)
    assert lp.shape == (3, 6)
    assert scoring.cross_entropy(lp) == pytest.approx(math.log(vocab), rel=1e-6)
    assert scoring.perplexity(lp) == pytest.approx(vocab, rel=1e-5)


def test_scorer_reads_the_sampled_token_at_the_right_position(tiny_llama):
    rng = np.random.default_rng(1)
    ctx = rng.integers(0, 97, size=(3, 5)).astype(np.int32)
    cont = rng.integers(0, 97, size=(3, 7)).astype(np.int32)
    lp = scoring.score_continuations(scoring.hf_logits_fn(tiny_llama), ctx, cont, batch_size=2, progress=False)
    full = torch.as_tensor(np.concatenate([ctx, cont], 1), dtype=torch.long)
    with torch.no_grad():
        logp = torch.log_softmax(tiny_llama(full).logits.float(), -1)
    for i in range(3):
        for j in range(7):
            # token j of the continuation sits at position 5 + j; its history ends at 4 + j
            assert lp[i, j] == pytest.approx(logp[i, 4 + j, cont[i, j]].item(), abs=1e-5)


def test_ratio_and_bootstrap():
    rng = np.random.default_rng(0)
    p = rng.normal(-2.0, 0.5, size=(40, 30)).astype(np.float32)
    q = p - 0.1
    assert scoring.ppl_ratio(p, p) == 1.0
    assert scoring.ppl_ratio(p, q) == pytest.approx(math.exp(-0.1), rel=1e-6)
    lo, hi = scoring.bootstrap_ppl_ratio(p, q, n_resamples=500, seed=0)
    assert lo == pytest.approx(math.exp(-0.1), rel=1e-5) and hi == pytest.approx(math.exp(-0.1), rel=1e-5)
    noisy = p + rng.normal(0, 0.3, size=p.shape).astype(np.float32)
    lo, hi = scoring.bootstrap_ppl_ratio(p, noisy, n_resamples=500, seed=0)
    assert lo < scoring.ppl_ratio(p, noisy) < hi


def test_pair_scores_kl_and_top1(tiny_llama):
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, 97, size=(2, 4)).astype(np.int32)
    cont = rng.integers(0, 97, size=(2, 6)).astype(np.int32)
    fn = scoring.hf_logits_fn(tiny_llama)
    same = scoring.score_pair(fn, fn, ctx, cont, batch_size=2, progress=False)
    assert np.allclose(same.kl, 0, atol=1e-6) and same.top1_agree.all()
    assert np.array_equal(same.logprobs_p, same.logprobs_q)

    def hotter(ids, n_last):
        return fn(ids, n_last) * 3.0

    other = scoring.score_pair(fn, hotter, ctx, cont, batch_size=2, progress=False)
    assert (other.kl > 0).all()
    assert other.top1_agree.all()  # scaling keeps the argmax
    assert not np.allclose(other.logprobs_q, other.logprobs_p)


def test_source_scored_against_its_own_samples_gives_f_equal_one(tiny_llama):
    rng = np.random.default_rng(3)
    ctx = rng.integers(0, 97, size=(6, 8)).astype(np.int32)
    samples = sampling.sample_transformers(
        tiny_llama,
        ctx,
        list(range(6)),
        set_name="search",
        n_tokens=12,
        temperature=1.0,
        seed=5,
        batch_size=4,
        progress=False,
    )
    scored = scoring.score_continuations(
        scoring.hf_logits_fn(tiny_llama), ctx, samples.tokens, batch_size=3, progress=False
    )
    assert np.max(np.abs(scored - samples.logprobs)) < 1e-4
    assert scoring.ppl_ratio(samples.logprobs, scored) == pytest.approx(1.0, abs=1e-5)
