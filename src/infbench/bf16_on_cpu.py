"""BF16 models on CPUs without BF16 instructions: matrix products and attention in float32 arithmetic.

On a CPU without AVX-512 BF16 or AMX (``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` false, e.g. an AVX2
EPYC), PyTorch's BF16 matrix product falls back to a slow generic kernel: the 3-bit GPTQ SmolLM2 package took
34 s for one 256-token row on 2 cores, the BF16 source 4.1 s for two 128-token rows. Upcasting both operands to
float32 (exact), multiplying there and rounding the product back to BF16 is the arithmetic a BF16 kernel does
anyway (float32 accumulation, BF16 output), and took 1.8 s and 0.95 s. Attention (SDPA) is computed the same
way: its BF16 operands upcast, its output rounded to BF16.

Two scopes, both decided per forward pass, never from the batch, so that a sequence's log-probs do not depend
on what it is batched with (the batch-invariance check; deciding per product from its rows, batch x tokens,
had a BF16 package score 1.005 against the same weights scored in another batch size):

- :func:`float32_products_on_cpu`: a forward pass over sequences of at least ``MIN_TOKENS`` tokens (scoring,
  prefill). The weights stay in BF16: the float32 copy of a weight lives only for its product, workspace of
  the call like activations, never resident storage. Shorter passes keep the BF16 kernel, because there the
  upcast of the weight costs more than the slow kernel loses (on 2 AVX2 cores, the 49,152 x 576 output layer:
  5 ms in BF16 and 78 ms upcast for one row, 101 ms and 182 ms for 16 rows, 0.94 s and 0.27 s for 256).
- :func:`float32_weights_held`: within a generation loop (one token per forward pass), every forward pass, with
  float32 copies of the linear layers' BF16 weights made once when the scope opens and dropped when it closes
  (workspace of the call, like a KV cache). A float32 product reads twice the bytes of a BF16 one but runs
  at memory speed: on this machine, while another test suite ran, a 576 x 1,536 product of one row took
  0.45 ms in float32 and 2.0 ms in BF16, and one decoding step of the 3-bit GPTQ SmolLM2 package after a
  64-token prompt 0.27-0.31 s held against 0.42-0.44 s in BF16 (one thread), 0.31-0.37 s against 0.49-0.55 s
  (two threads). Attention is upcast by a function mode, not the dispatch mode: a dispatch mode's Python call
  on each of a step's ~2,500 operations cost more than it saved (0.47-0.50 s a step).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
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
# attention: the query is the first operand, the output the first result
_ATTENTION = {_aten._scaled_dot_product_flash_attention_for_cpu.default}


def _up(value):
    return value.float() if isinstance(value, torch.Tensor) and value.dtype == torch.bfloat16 else value


def _in_float32(func, args, kwargs):
    """``func`` called with its BF16 tensor arguments upcast to float32."""
    return func(*map(_up, args), **{k: _up(v) for k, v in kwargs.items()})


class _Float32Arithmetic(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        left = _LEFT_OPERAND.get(func)
        if left is not None and args[left].dtype == torch.bfloat16:
            return _in_float32(func, args, kwargs).to(torch.bfloat16)
        if func in _ATTENTION and args[0].dtype == torch.bfloat16:
            output, *rest = _in_float32(func, args, kwargs)
            return (output.to(torch.bfloat16), *rest)
        return func(*args, **kwargs)


class _Float32Attention(TorchFunctionMode):
    """Attention (SDPA) of BF16 operands in float32, its output rounded to BF16: for the forward passes of
    :func:`float32_weights_held`, whose products are float32 already (why a function mode: the module doc)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and args[0].dtype == torch.bfloat16:
            return _in_float32(func, args, kwargs).to(torch.bfloat16)
        return func(*args, **kwargs)


def bf16_is_native() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


class _PerForwardPass:
    """The forward hooks of one model: a pass computes its attention in float32 while the model's weights are
    held in float32 (its products are float32 already), and its products and attention when its sequences are
    long."""

    def __init__(self):
        self.held = False
        self.modes: list[_Float32Attention | _Float32Arithmetic | None] = []

    def enter(self, module, args, kwargs):
        tokens = next(a for a in (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), *args) if a is not None)
        long = (tokens.shape[1] if tokens.dim() > 1 else tokens.shape[0]) >= MIN_TOKENS
        self.modes.append(_Float32Attention() if self.held else _Float32Arithmetic() if long else None)
        if self.modes[-1] is not None:
            self.modes[-1].__enter__()

    def leave(self, module, args, output):
        mode = self.modes.pop()
        if mode is not None:
            mode.__exit__(None, None, None)


_HOOKED: weakref.WeakKeyDictionary[torch.nn.Module, _PerForwardPass] = weakref.WeakKeyDictionary()


def float32_products_on_cpu(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every forward pass over long sequences computing its BF16 products and attention in
    float32, where the CPU has no BF16 instructions and the model is on the CPU in BF16; otherwise ``model``
    unchanged."""
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu" or first.dtype != torch.bfloat16 or bf16_is_native():
        return model
    passes = _HOOKED[model] = _PerForwardPass()
    model.register_forward_pre_hook(passes.enter, with_kwargs=True)
    model.register_forward_hook(passes.leave, always_call=True)
    return model


def _linear(weight: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x.float(), weight, bias).to(x.dtype)


def _float32_input(forward, x: torch.Tensor) -> torch.Tensor:
    return forward(x.float()).to(x.dtype)


@contextlib.contextmanager
def float32_weights_held(model: torch.nn.Module) -> Iterator[None]:
    """Within: every forward pass of a model set up by :func:`float32_products_on_cpu` in float32 arithmetic,
    its BF16 ``nn.Linear`` weights upcast once, and GPTQModel's quantized layers given float32 inputs (they
    dequantize to their BF16 scales' values and, with their weight cache on, keep the float32 weights for the
    call: :func:`infbench.compression.runtimes.hf._dequantized_once_per_call`). Elsewhere a no-op."""
    passes = _HOOKED.get(model)
    if passes is None or passes.held:
        yield
        return
    patched = []
    for m in model.modules():
        if "forward" in m.__dict__:  # already replaced by someone else: leave it
            continue
        if type(m).forward is torch.nn.Linear.forward and m.weight.dtype == torch.bfloat16:
            bias = None if m.bias is None else m.bias.float()
            m.forward = functools.partial(_linear, m.weight.float(), bias)
        elif hasattr(m, "clear_weight_cache"):  # GPTQModel's quantized linear layer
            m.forward = functools.partial(_float32_input, m.forward)
        else:
            continue
        patched.append(m)
    passes.held = True
    try:
        yield
    finally:
        passes.held = False
        for m in patched:
            del m.forward
