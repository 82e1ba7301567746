"""Runtime ``vllm``: a transformers checkpoint (BF16, or GPTQ in the layout vLLM's kernels take) run by vLLM's
offline engine, in the worker's own process, behind the package interface
(:mod:`infbench.compression.package_api`). The package brings weights only; the code is vLLM's and this module's.

The engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: no engine-core process, no sockets) with eager
execution, no tokenizer (token-id prompts only) and a KV cache of a stated size
(``verification.vllm_kv_cache_mib``; null: vLLM's own sizing). A forward hook on the model's ``LogitsProcessor``
copies every raw logits tensor the engine computes, in the model's dtype, before any sampling or log-softmax;
the rows of a sampling step are matched to their requests by the model runner's batch order (the order its
sampler uses). Nothing vLLM samples is used: the pipeline takes every argmax and log-probability itself.

- ``score(ids, n_last)``: each row one request of one token with prompt log-probs, so the engine computes the
  logits of every prompt position (the prompt's last one is the sampling step's): the last ``n_last`` of them.
  The budget of a step is at least the model's length, so a request is never split over steps.
- ``prefill(rows)``: the rows as requests of one token; ``step(tokens, rows)``: each live row, extended by its
  token, as a request again. Prefix caching makes a step compute the new position only (its earlier positions
  are the cached blocks of the same tokens): vLLM's offline API has no way to feed a token the caller chose into
  a running request, so every step is a short request (slower than vLLM's own decoding loop: docs/compression.md).
- Logits reach this process through ``collective_rpc`` (:func:`_drain`): the same call whether the worker is
  in this process or, with tensor parallelism, one of vLLM's worker processes.
- ``release()``: drops the prefix cache. The KV cache itself is vLLM's preallocated pool, kept for the engine's
  life (:meth:`kv_cache_bytes`). ``S_res`` of a ``vllm`` package is :meth:`model_bytes`, the tensors the engine
  loaded from it; what the engine holds besides (the KV pool, its buffers) is its workspace
  (:mod:`infbench.compression.storage`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

MIB = 1 << 20


def engine_env() -> None:
    """The environment the in-process engine needs (set before vLLM is imported)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process: no ZMQ sockets
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("VLLM_DO_NOT_TRACK", "1")


class VllmRunner:
    """vLLM's offline engine over ``checkpoint`` (see the module docstring)."""

    def __init__(
        self,
        checkpoint: Path,
        device: str,
        *,
        kv_cache_mib: int | None,
        dtype: str = "auto",
        seed: int = 0,
        tensor_parallel: int = 1,
    ):
        engine_env()
        import json

        from vllm import LLM

        config = json.loads((Path(checkpoint) / "config.json").read_text())
        length = int(config.get("max_position_embeddings") or 8192)
        options = {}
        if kv_cache_mib is not None:
            options["kv_cache_memory_bytes"] = int(kv_cache_mib) * MIB
        self._loaded_bytes: list[int] = []
        _count_loaded_tensors(self._loaded_bytes)
        self.llm = LLM(
            model=str(checkpoint),
            dtype=dtype,
            skip_tokenizer_init=True,
            enforce_eager=True,
            enable_prefix_caching=True,
            max_num_batched_tokens=max(length, 2048),
            seed=seed,
            tensor_parallel_size=tensor_parallel,
            disable_log_stats=True,
            **options,
        )
        self._kv_bytes = int(self.llm.collective_rpc(_install_hook)[0])
        self._rows: list[list[int]] | None = None

    def kv_cache_bytes(self) -> int:
        """Bytes of vLLM's preallocated KV cache (engine workspace)."""
        return self._kv_bytes

    def model_bytes(self) -> int:
        """Bytes of the model's tensors as the engine loaded them from the package (parameters and buffers, each
        storage once), counted before its CPU kernels repack them (oneDNN and sgl-kernel hold the packed
        weights outside the module's parameters): the package's ``S_res`` (:mod:`infbench.compression.storage`)."""
        if not self._loaded_bytes:
            raise RuntimeError("vLLM loaded no model through its default loader")
        return self._loaded_bytes[-1]

    def _generate(self, prompts: list[list[int]], prompt_logprobs: bool) -> list:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0 if prompt_logprobs else None)
        self.llm.collective_rpc(_drain)  # nothing of an earlier call
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return outputs, self.llm.collective_rpc(_drain)[0]

    def score(self, ids: np.ndarray, n_last: int):
        import torch

        self._rows = None
        out = []
        for row in np.asarray(ids).tolist():
            _, captured = self._generate([row], prompt_logprobs=True)
            if len(captured) != 2 or captured[0][0].shape[0] != 1 or captured[1][0].shape[0] != len(row) - 1:
                shapes = [tuple(c[0].shape) for c in captured]
                raise RuntimeError(f"vLLM computed logits {shapes} for one prompt of {len(row)} tokens")
            logits = torch.cat([captured[1][0], captured[0][0]])  # prompt positions, then the last one
            out.append(logits[len(row) - int(n_last) :])
        return torch.stack(out)

    def _last(self, prompts: list[list[int]]):
        """Raw logits of each prompt's last position, in the order of ``prompts``."""
        import torch

        outputs, captured = self._generate(prompts, prompt_logprobs=False)
        by_request = {}
        for logits, req_ids in captured:  # a request split over steps: its last step's row is the final one
            for i, req_id in enumerate(req_ids):
                by_request[req_id] = logits[i]
        missing = [o.request_id for o in outputs if _internal(o.request_id, by_request) is None]
        if missing:
            raise RuntimeError(f"vLLM computed no logits for requests {missing}")
        return torch.stack([by_request[_internal(o.request_id, by_request)] for o in outputs])

    def prefill(self, rows: list[np.ndarray], max_new_tokens: int):
        self._rows = [np.asarray(r, dtype=np.int64).tolist() for r in rows]
        return self._last(self._rows)

    def step(self, tokens: np.ndarray, rows: np.ndarray):
        if self._rows is None:
            raise RuntimeError("step before prefill")
        for token, row in zip(np.asarray(tokens).tolist(), np.asarray(rows).tolist()):
            self._rows[row].append(int(token))
        return self._last([self._rows[row] for row in np.asarray(rows).tolist()])

    def release(self) -> None:
        self._rows = None
        self.llm.reset_prefix_cache()


def _internal(request_id: str, known: dict) -> str | None:
    """The engine's id of an output's request (vLLM adds a suffix to the ids it gives the caller)."""
    if request_id in known:
        return request_id
    return next((k for k in known if k.startswith(request_id + "-") or request_id.startswith(k + "-")), None)


_CAPTURED: list = []
"""In a worker's process: the logits its model computed since the last :func:`_drain`, with their requests."""


def _install_hook(worker) -> int:
    """In each worker (this process with one device; with tensor parallelism, vLLM's worker processes): copy every
    logits tensor the model computes into :data:`_CAPTURED`, with the batch order of its requests; the KV cache's
    bytes. Under tensor parallelism the first rank gathers the whole vocabulary; the others compute none."""
    runner = worker.model_runner
    processor = runner.model.logits_processor

    def hook(module, inputs, output):
        if output is not None:
            req_ids = list(runner.input_batch.req_ids[: output.shape[0]])
            _CAPTURED.append((output.detach().clone(), req_ids))

    processor.register_forward_hook(hook)
    return sum(t.numel() * t.element_size() for t in _tensors(runner.kv_caches))


def _drain(worker) -> list:
    """In each worker: the logits captured since the last call (the caller reads the first rank's)."""
    captured, _CAPTURED[:] = list(_CAPTURED), []
    return captured


def _tensors(value):
    if hasattr(value, "numel"):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _count_loaded_tensors(into: list[int]) -> None:
    """Have vLLM's loader (in this process) append to ``into`` the bytes of each model's tensors once its weights
    are loaded, before they are processed into kernel layouts."""
    from vllm.model_executor.model_loader import base_loader

    process = getattr(base_loader.process_weights_after_loading, "infbench_original", None)
    process = process or base_loader.process_weights_after_loading

    def counted(model, *args, **kwargs):
        into.append(_tensor_bytes(model))
        return process(model, *args, **kwargs)

    counted.infbench_original = process
    base_loader.process_weights_after_loading = counted


def _tensor_bytes(model) -> int:
    """Bytes of a module's parameters and buffers, each storage once."""
    seen, total = set(), 0
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total
