"""The benchmark's arithmetic against real models: FLOPs as PyTorch's FLOP counter sees them, bytes as the
model's own parameters and KV cache hold them."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from infbench.hf_loading import cache_kwargs
from infbench.perf import roofline


def _llama(tied: bool, kv_heads: int = 2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=101,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=kv_heads,
        max_position_embeddings=256,
        tie_word_embeddings=tied,
    )
    return LlamaForCausalLM(cfg).eval()


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("kv_heads", [2, 6])
@torch.inference_mode()
def test_decode_step_flops_are_what_the_flop_counter_counts(kv_heads):
    model = _llama(tied=True, kv_heads=kv_heads)
    model.config._attn_implementation = "eager"  # attention as matrix products the counter sees (not CPU SDPA)
    shape = roofline.Shape.of(model)
    ids = torch.randint(0, 101, (3, 9))
    # a one-token pass: attention over one key, so causal and full counting agree
    assert _counted(lambda: model(ids[:, :1], use_cache=False).logits) == (
        roofline.linear_flops(shape, 3, 3) + roofline.attention_flops(shape, 3, 1)
    )
    cache = cache_kwargs(model(ids[:, :8], use_cache=True))
    step = _counted(lambda: model(ids[:, 8:], use_cache=True, **cache).logits)
    assert step == roofline.linear_flops(shape, 3, 3) + roofline.attention_flops(shape, 3, 1, cached=8)


def test_causal_attention_counts_each_query_against_its_keys():
    shape = roofline.Shape.of(_llama(tied=True))
    per_key = 4 * shape.layers * shape.heads * shape.head_dim
    assert roofline.attention_flops(shape, 2, 5, cached=3) == 2 * per_key * sum(3 + i + 1 for i in range(5))
    assert roofline.forward_flops(shape, 2, 5, 1) == (
        roofline.linear_flops(shape, 10, 2) + roofline.attention_flops(shape, 2, 5)
    )


@pytest.mark.parametrize("tied", [True, False])
@torch.inference_mode()
def test_bytes_are_the_parameters_and_the_cache_the_model_holds(tied):
    model = _llama(tied)
    shape = roofline.Shape.of(model)
    params = sum(p.numel() * 4 for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel() * 4
    assert shape.weight_bytes == (params if tied else params - embedding)
    cache = next(iter(cache_kwargs(model(torch.randint(0, 101, (3, 7)), use_cache=True)).values()))
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    assert shape.kv_bytes_per_token * 3 * 7 == held
    assert roofline.decode_step_bytes(shape, 3, 7) == shape.weight_bytes + 3 * 8 * shape.kv_bytes_per_token


def test_sampling_bound_is_prefill_compute_plus_each_decode_step_at_the_bandwidth():
    shape = roofline.Shape.of(_llama(tied=True))
    flops, bw = 1e12, 1e11
    steps = sum(roofline.decode_step_bytes(shape, 4, 10 + t) for t in range(5))
    expected = roofline.forward_flops(shape, 4, 10, 1) / flops + steps / bw
    assert roofline.sampling_bound_s(shape, 4, 10, 6, matmul_flops_per_s=flops, copy_bytes_per_s=bw) == pytest.approx(
        expected, rel=1e-12
    )


def test_decode_profile_times_a_step_and_the_draw_against_the_bound():
    from infbench.perf import decode_profile

    table = decode_profile.profile(_llama(True), batch=3, cached=20, copy_bytes_per_s=1e11, steps=3)
    step, draw = table.iloc[0], table.iloc[-1]
    assert step["what"] == "decode step" and step["ms"] > 0 and step["bound_ms"] > 0
    assert draw["what"].startswith("draw") and draw["ms"] > 0
    assert decode_profile.kind("flash_fwd_kernel<Flash_fwd_kernel_traits<64>>") == "attention"
    assert decode_profile.kind("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_TNT") == "matmul"
    assert decode_profile.kind("vectorized_elementwise_kernel<4, add<bf16>>") == "elementwise and other"
