"""One kernel for each elementwise step of a Llama-family decoder layer, for CUDA sampling (issue 23).

Besides its products and attention, a decode step of transformers' Llama runs about 35 small kernels per
layer: RMSNorm's eight (twice), the rotary embedding's ten, SiLU and the gate's product. Each is a launch of
a few microseconds over a few MB; at the 8B shape's 32 layers they kept a step at 0.65 of the bandwidth
bound. Here each becomes one Triton kernel, compiled by ``torch.compile`` from the same formula (RMSNorm in
float32, as transformers computes it): one small function per kind, compiled once and used by every layer,
not the whole model (whose compilation takes longer than a set samples).

Only modules whose ``forward`` is, source for source, Llama's RMSNorm or SiLU MLP, and a rotary function that
is Llama's, are replaced; other architectures keep their own. :func:`apply` returns what undoes it.
"""

from __future__ import annotations

import functools
import inspect
import sys
import textwrap
from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers.models.llama import modeling_llama as llama


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def _silu_product(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def _rotary(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    half = q.shape[-1] // 2
    q_rot = torch.cat((-q[..., half:], q[..., :half]), dim=-1)
    k_rot = torch.cat((-k[..., half:], k[..., :half]), dim=-1)
    return q * cos + q_rot * sin, k * cos + k_rot * sin


@functools.cache
def _compiled(fn: Callable) -> Callable:
    return torch.compile(fn, fullgraph=True)


@functools.cache
def _source(fn: Callable) -> str:
    try:
        return textwrap.dedent(inspect.getsource(inspect.unwrap(fn)))
    except (OSError, TypeError):
        return ""


def _is_llamas(fn: Callable, llamas: Callable) -> bool:
    return bool(_source(fn)) and _source(fn) == _source(llamas)


def apply(model: torch.nn.Module) -> Callable[[], None]:
    """Replace ``model``'s Llama-style elementwise steps by fused kernels (CUDA only); returns the undo."""
    if next(model.parameters()).device.type != "cuda":
        return lambda: None
    norm, silu_product, rotary = _compiled(_rms_norm), _compiled(_silu_product), _compiled(_rotary)
    patched: list[torch.nn.Module] = []
    modelings = set()
    for m in model.modules():
        forward = type(m).forward
        if _is_llamas(forward, llama.LlamaRMSNorm.forward):
            m.forward = functools.partial(lambda x, m: norm(x, m.weight, m.variance_epsilon), m=m)
        elif _is_llamas(forward, llama.LlamaMLP.forward) and getattr(m.config, "hidden_act", None) == "silu":
            m.forward = functools.partial(lambda x, m: m.down_proj(silu_product(m.gate_proj(x), m.up_proj(x))), m=m)
        else:
            modelings.add(sys.modules[type(m).__module__])
            continue
        patched.append(m)
    rotaries = {
        mod: mod.apply_rotary_pos_emb
        for mod in modelings
        if hasattr(mod, "apply_rotary_pos_emb") and _is_llamas(mod.apply_rotary_pos_emb, llama.apply_rotary_pos_emb)
    }
    for mod in rotaries:
        mod.apply_rotary_pos_emb = rotary

    def undo() -> None:
        for m in patched:
            del m.forward
        for mod, original in rotaries.items():
            mod.apply_rotary_pos_emb = original

    return undo
