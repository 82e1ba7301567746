"""The sampler's decoders against one full forward pass of the same tokens (float32, real transformers models)."""

import numpy as np
import pytest
import torch

from infbench.compression import batched_decoding, sampling


def _llama(kv_heads: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(cfg).eval()


def _sliding_mistral():
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    cfg = MistralConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=4,
    )
    return MistralForCausalLM(cfg).eval()


@torch.inference_mode()
def _decoded_logits(dec, ids: torch.Tensor, n_context: int) -> torch.Tensor:
    """Logits after each position from ``n_context - 1`` on: the prefill, then one step per further token."""
    try:
        out = [dec.prefill(ids[:, :n_context])]
        out += [dec.step(ids[:, t]) for t in range(n_context, ids.shape[1])]
    finally:
        dec.close()
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("kv_heads", [2, 4])  # grouped-query (packed heads) and plain multi-head attention
@pytest.mark.parametrize("window", [3, 8, 256])
def test_static_decoder_matches_a_full_forward_pass(kv_heads, window):
    model = _llama(kv_heads)
    ids = torch.as_tensor(np.random.default_rng(0).integers(0, 97, size=(3, 14)), dtype=torch.long)
    with torch.inference_mode():
        full = model(ids).logits[:, 4:]
    before = model.config._attn_implementation
    dec = batched_decoding.decoder(model, 3, 14, window=window, cuda_graphs=False)
    assert isinstance(dec, batched_decoding.StaticDecoder)
    decoded = _decoded_logits(dec, ids, 5)
    assert model.config._attn_implementation == before  # restored by close()
    assert torch.allclose(decoded, full, atol=1e-5)


def test_a_sliding_window_model_decodes_through_its_dynamic_cache():
    model = _sliding_mistral()
    ids = torch.as_tensor(np.random.default_rng(1).integers(0, 97, size=(2, 12)), dtype=torch.long)
    with torch.inference_mode():
        full = model(ids).logits[:, 3:]
    dec = batched_decoding.decoder(model, 2, 12, window=256, cuda_graphs=False)
    assert isinstance(dec, batched_decoding.DynamicDecoder)
    assert torch.allclose(_decoded_logits(dec, ids, 4), full, atol=1e-5)


def test_sampled_continuations_do_not_depend_on_batch_order_or_window():
    model = _llama(2)
    ctx = np.random.default_rng(2).integers(0, 97, size=(5, 6)).astype(np.int32)
    kw = dict(set_name="search", n_tokens=20, temperature=1.0, seed=0, progress=False)
    a = sampling.sample_transformers(model, ctx, [10, 11, 12, 13, 14], batch_size=5, **kw)
    order = [3, 0, 4, 1, 2]
    b = sampling.sample_transformers(model, ctx[order], [10 + i for i in order], batch_size=2, kv_window=4, **kw)
    assert np.array_equal(a.tokens[order], b.tokens)
    assert np.allclose(a.logprobs[order], b.logprobs, atol=1e-5)


def test_rows_that_fit_counts_cache_prefill_and_vocabulary_workspace():
    model = _llama(2)
    kv = batched_decoding.kv_bytes_per_token(model)
    assert kv == 2 * 2 * 2 * 8 * 4  # keys and values x layers x kv heads x head dim x float32
    per_row = kv * 100 + 20 * (8 * 32 + 3 * 64) * 4 + 97 * (4 + 12)
    assert batched_decoding.rows_that_fit(model, 20, 100, 10 * per_row, share=1.0) == 10
    assert batched_decoding.rows_that_fit(model, 20, 100, 10 * per_row - 1, share=1.0) == 9
