import numpy as np
import pytest
import torch

from infbench.compression import sampling


def test_draw_follows_softmax():
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0])
    logp = torch.log(probs).expand(20000, -1)
    uniforms = torch.as_tensor(np.random.default_rng(0).random(20000))
    tokens = sampling.draw(logp, uniforms)
    freq = np.bincount(tokens.numpy(), minlength=5) / 20000
    assert np.allclose(freq, probs.numpy(), atol=0.012)
    assert freq[4] == 0.0


def test_draw_is_the_inverse_cdf_at_the_uniform():
    logp = torch.log(torch.tensor([[0.0, 0.5, 0.0, 0.5]]))
    for u, token in [(0.0, 1), (0.4999, 1), (0.5, 3), (0.999999, 3)]:
        assert int(sampling.draw(logp, torch.tensor([u], dtype=torch.float64))) == token


def test_batches_chosen_by_memory_are_the_fewest_and_even():
    assert sampling.even_rows(256, 222) == 128  # not 222 + 34
    assert sampling.even_rows(256, 256) == sampling.even_rows(256, 1000) == 256
    assert sampling.even_rows(10, 3) == 3 and sampling.even_rows(7, 0) == 1


def test_context_streams_depend_on_the_context_alone():
    both = sampling.context_uniforms(0, "search", [3, 7], 50)
    assert np.array_equal(both[1], sampling.context_uniforms(0, "search", [7], 50)[0])
    assert np.array_equal(both[:, :20], sampling.context_uniforms(0, "search", [3, 7], 20))
    assert not np.array_equal(both[0], sampling.context_uniforms(0, "verification", [3], 50)[0])
    assert not np.array_equal(both[0], sampling.context_uniforms(1, "search", [3], 50)[0])


def _sample(model, ctx, **kw):
    args = dict(set_name="search", n_tokens=10, temperature=1.0, seed=0, batch_size=4, progress=False)
    args.update(kw)
    return sampling.sample_transformers(model, ctx, list(range(len(ctx))), **args)


def test_seeded_deterministic_and_independent_of_batching(tiny_llama):
    ctx = np.random.default_rng(0).integers(0, 97, size=(5, 6)).astype(np.int32)
    a = _sample(tiny_llama, ctx)
    b = _sample(tiny_llama, ctx, batch_size=1)
    assert np.array_equal(a.tokens, b.tokens)
    assert np.allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert not np.array_equal(a.tokens, _sample(tiny_llama, ctx, seed=1).tokens)
    assert not np.array_equal(a.tokens, _sample(tiny_llama, ctx, set_name="verification").tokens)


def test_stored_logprobs_are_the_raw_model_logprobs_at_any_temperature(tiny_llama):
    ctx = np.random.default_rng(1).integers(0, 97, size=(2, 6)).astype(np.int32)
    s = _sample(tiny_llama, ctx, temperature=0.5, n_tokens=3)
    with torch.no_grad():
        logits = tiny_llama(torch.as_tensor(ctx, dtype=torch.long)).logits[:, -1]
    raw = torch.log_softmax(logits, -1)
    for i in range(2):
        assert s.logprobs[i, 0] == pytest.approx(raw[i, s.tokens[i, 0]].item(), abs=1e-5)


def test_the_vllm_backend_without_the_vllm_environment_names_it(monkeypatch, tmp_path):
    from infbench import vllm_env
    from infbench.compression import vllm_likelihood

    monkeypatch.setattr(vllm_env, "vllm_python", lambda: tmp_path / ".venv-vllm/bin/python")
    with pytest.raises(vllm_env.VllmEnvironmentMissing, match=r"\.venv-vllm/bin/python.*setup-env\.sh"):
        vllm_likelihood.sample(
            np.zeros((1, 2), dtype=np.int32),
            checkpoint="x",
            indices=[0],
            set_name="search",
            n_tokens=2,
            temperature=1.0,
            seed=0,
            batch_size=1,
            dtype="bfloat16",
        )
