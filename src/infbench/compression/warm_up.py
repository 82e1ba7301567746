"""Runtime state made before a package is read, in the empty worker and the measured one alike.

``S_res`` is a sandbox's memory beyond an empty worker's (:mod:`infbench.compression.storage`). State a runtime
creates only when it first runs a model would be charged to the package although no package holds it; what
both workers create before the package is read cancels out. Two warm-ups, run by the worker
(:mod:`infbench.compression.worker`) after its runtime's modules are imported:

- :func:`cuda`: the first inference on a GPU (lazy kernel loading, cuBLAS handles; docs/gpu.md).
- :func:`source_shapes`: on the CPU, the kernels of the shapes the pipeline asks for. oneDNN builds and keeps a
  matrix-product kernel for every new shape of a BF16 product (its primitive cache) and PyTorch keeps state of
  its own per shape: about 3.6 MiB for each new request shape of SmolLM2 and 8 MiB for its first generation,
  measured after ``malloc_trim``. The 4-bit GPTQ SmolLM2 package held 109 MiB of tensors and was charged
  32 MiB beyond them after a verification, over the 16 MiB allowance; with the warm-up, 13 MiB. So a one-layer
  twin of the source (its architecture from the source's ``config.json``, random weights) answers each one-pass
  scoring shape the verification sends and runs each batch of generation it drives (a prefill, then steps with
  one row fewer each time, down to one row), once with ``nn.Linear``'s
  ``(out, in)`` weights and once multiplying by ``(in, out)`` matrices (``x @ w``, as GPTQModel's CPU kernel
  multiplies by its dequantized weights), which oneDNN keys apart. Where the CPU multiplies BF16 natively
  (AMX), each new row count of a prefill kept about 3 MiB and the first long prompts about 11 MiB more (the
  embedded GPTQ baselines held 20 MB more after a verification than after loading and failed
  ``storage_resident`` on such machines only): the generations include every row count of a gate batch and a
  full batch at the longest gate prompt (:func:`infbench.compression.measure.source_shapes`). A package whose
  runtime uses other shapes gains nothing from it: the twin's state is in both workers.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from pydantic import BaseModel

from infbench.compression.runtimes.hf import HFRunner


class SourceShapes(BaseModel):
    """What :func:`source_shapes` runs: the source's architecture and the shapes of the pipeline's requests."""

    config: dict  # the source's transformers config.json
    scores: list[tuple[int, int, int]]  # (sequences, tokens, n_last) of each one-pass scoring shape
    generations: list[tuple[int, int, int]]  # (rows, prompt tokens, steps) of the batches of generation


def _generate(runner: HFRunner, rows: int, prompt: int, steps: int) -> None:
    """A batch of ``rows`` prompts, then ``steps`` steps, one row fewer each step from the second on."""
    runner.prefill([np.arange(1, prompt + 1)] * rows, steps)
    live = np.arange(rows)
    for _ in range(steps):
        runner.step(np.ones(len(live), dtype=np.int64), live)
        live = live[:-1] if len(live) > 1 else live


def _twin(config: dict) -> torch.nn.Module:
    """A model of the source's architecture with one layer of each kind, random weights in its dtype."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from infbench.bf16_on_cpu import float32_products_on_cpu

    cfg = AutoConfig.for_model(**config)
    kinds = list(dict.fromkeys(getattr(cfg, "layer_types", None) or []))
    if kinds:
        cfg.layer_types = kinds
    cfg.num_hidden_layers = max(1, len(kinds))
    dtype = cfg.dtype if isinstance(cfg.dtype, torch.dtype) else getattr(torch, str(cfg.dtype or "float32"))
    return float32_products_on_cpu(AutoModelForCausalLM.from_config(cfg).to(dtype=dtype).eval())


def _times_matrix(matrix: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    out = (x.reshape(-1, x.shape[-1]) @ matrix).reshape(*x.shape[:-1], matrix.shape[1])
    return out if bias is None else out + bias


def _run(runner: HFRunner, spec: SourceShapes) -> None:
    for sequences, tokens, n_last in spec.scores:
        runner.score(np.ones((sequences, tokens), dtype=np.int64), n_last)
    for rows, prompt, steps in spec.generations:
        _generate(runner, rows, prompt, steps)
    runner.release()


def source_shapes(spec: SourceShapes) -> None:
    """Run the pipeline's request shapes on a one-layer twin of the source, on the CPU (module docstring)."""
    model = _twin(spec.config)
    _run(HFRunner.of(model), spec)
    head = model.get_output_embeddings()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            module.forward = functools.partial(_times_matrix, module.weight.t().contiguous(), module.bias)
    _run(HFRunner.of(model), spec)


def cuda(device: str) -> None:
    """Create, in the baseline and the measured worker alike, the runtime state a model's first inference
    would otherwise add to the package's figure (docs/gpu.md, measured on an H200: about 80 MiB of host memory
    after the first inference of a 7.6 MiB and of a 1.24B BF16 package, and more with every new sequence
    length):

    - cuDNN's attention is switched off. It builds and keeps an execution plan per shape (about 1.3 MiB of
      host memory for each new sequence length, and its runtime-compiled kernels on disk), state no empty
      worker can hold in advance; SDPA's flash and memory-efficient kernels keep none.
    - The hf runtime's own calls (one-pass scoring, the block prefill, steps) run on one-layer Llamas of head
      size 64 and 128 in bf16, fp16 and fp32: CUDA loads each kernel at its first launch (lazy module
      loading), and cuBLAS creates its handles and workspaces, all of it before the package is read."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.cuda.init()
    torch.backends.cuda.enable_cudnn_sdp(False)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for heads in (8, 4):  # head sizes 64 and 128
            config = LlamaConfig(
                vocab_size=1024,
                hidden_size=512,
                intermediate_size=1024,
                num_hidden_layers=1,
                num_attention_heads=heads,
                num_key_value_heads=2,
                max_position_embeddings=256,
            )
            runner = HFRunner.of(LlamaForCausalLM(config).to(device=device, dtype=dtype).eval())
            runner.score(np.ones((1, 8), dtype=np.int64), 4)
            runner.score(np.ones((2, 100), dtype=np.int64), 50)
            _generate(runner, 2, 70, 4)  # two prompt blocks, then steps of two rows and of one
            runner.release()
            del runner
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
