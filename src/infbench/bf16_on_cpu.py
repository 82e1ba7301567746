"""BF16 models on CPUs without BF16 instructions: matrix products in float32 arithmetic, weights kept in BF16.

On a CPU without AVX-512 BF16 or AMX (``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` false, e.g. an AVX2
EPYC), PyTorch's BF16 matrix product falls back to a slow generic kernel: the 3-bit GPTQ SmolLM2 package took
34 s for one 256-token row on 2 cores, the BF16 source 4.1 s for two 128-token rows. Upcasting both operands to
float32 (exact), multiplying there and rounding the product back to BF16 is the arithmetic a BF16 kernel does
anyway (float32 accumulation, BF16 output), and took 1.8 s and 0.95 s. The weights stay in BF16: the float32
copy of a weight lives only for its product, workspace of the call like activations, never resident storage.

A forward pass over sequences of fewer than ``MIN_TOKENS`` tokens (decoding one token, short prompts) keeps the
BF16 kernel: there the upcast of the weight costs more than the slow kernel loses (on 2 AVX2 cores, the
49,152 x 576 output layer: 5 ms in BF16 and 78 ms upcast for one row, 101 ms and 182 ms for 16 rows, 0.94 s and
0.27 s for 256). The choice is made per forward pass from the sequence length, never from the batch, so a
sequence's log-probs do not depend on what it is batched with (the batch-invariance check): deciding per
product from its rows (batch x tokens) had a BF16 package score 1.005 against the same weights scored in
another batch size.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MIN_TOKENS = 64

_aten = torch.ops.aten
# each product's left operand: its position among the arguments
_LEFT_OPERAND = {
    _aten.linear.default: 0,
    _aten.matmul.default: 0,
    _aten.mm.default: 0,
    _aten.bmm.default: 0,
    _aten.addmm.default: 1,
    _aten.baddbmm.default: 1,
}


class _Float32Products(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        left = _LEFT_OPERAND.get(func)
        if left is not None and args[left].dtype == torch.bfloat16:
            up = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 else a for a in args]
            return func(*up, **kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


def bf16_is_native() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def float32_products_on_cpu(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every forward pass computing its BF16 products in float32, where the CPU has no BF16
    instructions and the model is on the CPU in BF16; otherwise ``model`` unchanged."""
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu" or first.dtype != torch.bfloat16 or bf16_is_native():
        return model
    active: list[_Float32Products | None] = []

    def enter(module, args, kwargs):
        tokens = next(a for a in (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), *args) if a is not None)
        long = tokens.shape[1] if tokens.dim() > 1 else tokens.shape[0]
        active.append(_Float32Products() if long >= MIN_TOKENS else None)
        if active[-1] is not None:
            active[-1].__enter__()

    def leave(module, args, output):
        mode = active.pop()
        if mode is not None:
            mode.__exit__(None, None, None)

    model.register_forward_pre_hook(enter, with_kwargs=True)
    model.register_forward_hook(leave, always_call=True)
    return model
