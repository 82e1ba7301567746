"""Fused elementwise kernels of Llama-style layers (:mod:`infbench.compression.fused_elementwise`)."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama as llama

from infbench.compression import fused_elementwise


def _llama(device="cpu", dtype=torch.float32):
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()


def test_the_fused_formulas_are_transformers_own():
    torch.manual_seed(1)
    norm = llama.LlamaRMSNorm(64, eps=1e-5).to(torch.bfloat16)
    norm.weight.data.normal_()
    x = torch.randn(3, 5, 64).bfloat16()
    assert torch.equal(fused_elementwise._rms_norm(x, norm.weight, 1e-5), norm(x))
    q, k = torch.randn(2, 4, 5, 32), torch.randn(2, 2, 5, 32)
    cos, sin = torch.randn(2, 5, 32), torch.randn(2, 5, 32)
    for ours, theirs in zip(fused_elementwise._rotary(q, k, cos, sin), llama.apply_rotary_pos_emb(q, k, cos, sin)):
        assert torch.equal(ours, theirs)
    gate, up = torch.randn(4, 352), torch.randn(4, 352)
    assert torch.equal(fused_elementwise._silu_product(gate, up), torch.nn.functional.silu(gate) * up)


def test_nothing_is_replaced_on_the_cpu():
    model = _llama()
    undo = fused_elementwise.apply(model)
    assert all("forward" not in vars(m) for m in model.modules())
    assert llama.apply_rotary_pos_emb is not fused_elementwise._compiled(fused_elementwise._rotary)
    undo()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@torch.inference_mode()
def test_a_fused_forward_pass_matches_transformers_and_is_undone():
    model = _llama("cuda", torch.bfloat16)
    ids = torch.randint(0, 512, (4, 96), device="cuda")
    original = llama.apply_rotary_pos_emb
    plain = model(ids).logits.float()
    undo = fused_elementwise.apply(model)
    replaced = [m for m in model.modules() if "forward" in vars(m)]
    assert len(replaced) == 2 * 2 + 1 + 2  # two norms and an MLP per layer, the final norm
    assert llama.apply_rotary_pos_emb is not original
    fused = model(ids).logits.float()
    undo()
    assert all("forward" not in vars(m) for m in model.modules()) and llama.apply_rotary_pos_emb is original
    assert float((fused - plain).norm() / plain.norm()) < 1e-2  # bf16 rounding
    assert torch.equal(model(ids).logits.float(), plain)
