"""BF16 products in float32 on CPUs without BF16 instructions (:mod:`infbench.bf16_on_cpu`)."""

import pytest
import torch

from infbench import bf16_on_cpu


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(64, 256)
        self.down = torch.nn.Linear(256, 64, bias=False)

    def forward(self, x):
        if x.isnan().any():
            raise ValueError("nan input")
        return self.down(torch.relu(self.up(x))) @ self.up.weight[:, :64].T


def _float32_reference(model, x):
    up = x.float() @ model.up.weight.float().T + model.up.bias.float()
    hidden = torch.relu(up.bfloat16()).float()
    down = (hidden @ model.down.weight.float().T).bfloat16()
    return (down.float() @ model.up.weight[:, :64].float().T).bfloat16()


@pytest.fixture
def without_bf16_instructions(monkeypatch):
    monkeypatch.setattr(bf16_on_cpu, "bf16_is_native", lambda: False)


def _model():
    torch.manual_seed(0)
    return TwoLayers().to(torch.bfloat16).eval()


@torch.inference_mode()
def test_products_over_long_sequences_are_float32_arithmetic_rounded_to_bf16(without_bf16_instructions):
    model = _model()
    x = torch.randn(2, bf16_on_cpu.MIN_TOKENS, 64).bfloat16()
    native = model(x)
    bf16_on_cpu.float32_products_on_cpu(model)
    out = model(x)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, _float32_reference(model, x))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}, "the weights stay in BF16"
    # the same arithmetic class as the BF16 kernel: at most a rounding step apart
    assert (out.float() - native.float()).abs().max() <= 0.05 * native.float().abs().max()


@torch.inference_mode()
def test_short_sequences_keep_the_bf16_kernel_whatever_the_batch(without_bf16_instructions):
    model = _model()
    x = torch.randn(64, bf16_on_cpu.MIN_TOKENS - 1, 64).bfloat16()  # 4,032 rows a product, but short sequences
    native = model(x)
    bf16_on_cpu.float32_products_on_cpu(model)
    assert torch.equal(model(x), native)
    assert torch.equal(model(x[:1]), native[:1])


@torch.inference_mode()
def test_a_failing_forward_leaves_no_mode_behind(without_bf16_instructions):
    model = bf16_on_cpu.float32_products_on_cpu(_model())
    with pytest.raises(ValueError, match="nan input"):
        model(torch.full((1, bf16_on_cpu.MIN_TOKENS, 64), float("nan")).bfloat16())
    a, b = torch.randn(32, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    assert torch.equal(a @ b, torch.ops.aten.mm.default(a, b)), "outside a forward pass products are untouched"
    assert torch._C._len_torch_dispatch_stack() == 0


def test_models_elsewhere_are_left_alone(without_bf16_instructions):
    model = _model().float()
    bf16_on_cpu.float32_products_on_cpu(model)
    assert not model._forward_pre_hooks and not model._forward_hooks


class Attending(torch.nn.Module):
    """A linear layer, attention and a linear layer without bias: what a decoding step is made of."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(576, 576)  # SmolLM2's width: there the BF16 kernel's rounding differs
        self.out = torch.nn.Linear(576, 576, bias=False)

    def forward(self, x):
        h = self.qkv(x).unflatten(-1, (9, 64)).transpose(1, 2)
        return self.out(torch.nn.functional.scaled_dot_product_attention(h, h, h).transpose(1, 2).flatten(-2))


def _attending_reference(model, x):
    h = (x.float() @ model.qkv.weight.float().T + model.qkv.bias.float()).bfloat16()
    h = h.unflatten(-1, (9, 64)).transpose(1, 2).float()
    a = torch.nn.functional.scaled_dot_product_attention(h, h, h).bfloat16().transpose(1, 2).flatten(-2)
    return (a.float() @ model.out.weight.float().T).bfloat16()


@torch.inference_mode()
def test_held_weights_make_every_pass_float32_arithmetic_and_are_dropped_after(without_bf16_instructions):
    torch.manual_seed(0)
    model = bf16_on_cpu.float32_products_on_cpu(Attending().to(torch.bfloat16).eval())
    x = torch.randn(3, 5, 576).bfloat16()  # short sequences: a decoding step, a short prompt
    native = model(x)
    with bf16_on_cpu.float32_weights_held(model):
        held = model(x)
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}, "the copies are the scope's, not the model's"
    assert torch.equal(held, _attending_reference(model, x))
    # the arithmetic of a long pass, up to where a bias is rounded (the long pass's products are aten's, whose
    # linear layer may add the bias after rounding to BF16)
    long = torch.cat([x, torch.randn(3, bf16_on_cpu.MIN_TOKENS, 576).bfloat16()], dim=1)
    reference = _attending_reference(model, long).float()
    assert (model(long).float() - reference).abs().max() <= 2**-7 * reference.abs().max()
    assert not any("forward" in m.__dict__ for m in model.modules()), "nothing of the scope is left"
    assert torch.equal(model(x), native), "after the scope short passes keep the BF16 kernel"
    assert torch._C._len_torch_function_stack() == 0


def test_held_weights_leave_other_models_alone(without_bf16_instructions):
    model = _model().float()
    with bf16_on_cpu.float32_weights_held(bf16_on_cpu.float32_products_on_cpu(model)):
        assert not any("forward" in m.__dict__ for m in model.modules())
