"""Runtimes that run a submission inside the worker process.

Every runtime returns a *runner* with the package interface (:mod:`infbench.compression.package_api`:
``prefill``, ``step``, ``release``; the pipeline's own runtimes also ``score``), and optionally
``native_resident_bytes() -> int``: model bytes held outside Python objects (llama.cpp's tensors), added to the
live-tensor count.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from infbench.compression.submission import Manifest


def _transformers_modules(checkpoint: Path) -> list[str]:
    """What loading the transformers checkpoint ``checkpoint`` imports (its model code alone is about
    110 MiB of heap): none if it is not one."""
    try:
        config = json.loads((checkpoint / "config.json").read_text())
    except (OSError, ValueError):
        return []
    modules = ["transformers", "transformers.modeling_utils"]
    model_type = str(config.get("model_type", ""))
    if model_type.isidentifier() and importlib.util.find_spec(f"transformers.models.{model_type}") is not None:
        modules.append(f"transformers.models.{model_type}.modeling_{model_type}")
    if (config.get("quantization_config") or {}).get("quant_method") == "gptq":
        # GPTQModel wraps its kernels in torch.compile at load, which imports inductor (about 50 MB of heap)
        modules += ["gptqmodel", "torch._dynamo", "torch._inductor.compile_fx"]
    return modules


def preload_modules(package: Path, manifest: Manifest) -> list[str]:
    """What the worker imports before it reads anything of the package: the same list for the baseline worker
    and the measured one, so their memory differs by what the package loads (storage.py). The runtime's
    modules, those of a transformers checkpoint in ``weights``, and a ``python`` package's own ``preload``."""
    if manifest.runtime == "llama.cpp":
        return ["numpy", "llama_cpp", "llama_cpp._internals"]
    if manifest.runtime == "vllm":  # the engine's own imports (its model code is imported at load)
        return ["numpy", "torch", "vllm", "vllm.entrypoints.llm"]
    modules = ["numpy", "torch", *_transformers_modules(package / manifest.weights)]
    if manifest.runtime == "python":
        modules += manifest.preload
    return list(dict.fromkeys(modules))


# Modules a runtime imports only where they are installed, bound into its sandbox without being preloaded:
# transformers spreads a model over several GPUs with accelerate (hf_loading.from_pretrained_on).
OPTIONAL = {"transformers": ("accelerate",)}


def optional_modules(preload: list[str]) -> list[str]:
    """What the sandbox of a worker that preloads ``preload`` binds beside them (:data:`OPTIONAL`)."""
    tops = {m.split(".")[0] for m in preload}
    return [m for top, extra in OPTIONAL.items() if top in tops for m in extra]


class WorkerLaunch(BaseModel):
    """How the workers of a runtime start (the measured one and its empty twin alike): the Python that runs
    them, their system-call profile (:mod:`infbench.sandbox.seccomp`) and, for ``vllm``, its KV cache."""

    model_config = ConfigDict(frozen=True)
    python: str = sys.executable
    seccomp: Literal["worker", "engine"] = "worker"
    kv_cache_mib: int | None = None
    read_only: tuple[str, ...] = ()  # host paths bound read-only at their own path, beyond the runtime


def worker_launch(manifest: Manifest, *, vllm_kv_cache_mib: int) -> WorkerLaunch:
    """``vllm``: the vLLM environment's interpreter (vLLM pins its own torch and transformers,
    :mod:`infbench.vllm_env`) under the engine profile (loopback sockets: vLLM's code only runs there), with
    the host's CPU topology readable; every other runtime: this interpreter under the worker profile."""
    if manifest.runtime == "vllm":
        from infbench.vllm_env import host_topology, require_vllm_python

        return WorkerLaunch(
            python=str(require_vllm_python()),
            seccomp="engine",
            kv_cache_mib=vllm_kv_cache_mib,
            read_only=host_topology(),
        )
    return WorkerLaunch()


def load_runner(package: Path, manifest: Manifest, device: str, threads: int, *, kv_cache_mib: int | None = None):
    """``manifest``'s runner over ``package``; ``kv_cache_mib``: the size of vLLM's KV cache (runtime ``vllm``)."""
    if manifest.runtime == "vllm":
        from infbench.compression.runtimes.vllm import VllmRunner

        return VllmRunner(package / manifest.weights, device, kv_cache_mib=kv_cache_mib)
    if manifest.runtime == "hf":
        from infbench.compression.runtimes.hf import HFRunner

        return HFRunner(package / manifest.weights, device)
    if manifest.runtime == "llama.cpp":
        from infbench.compression.runtimes.llama_cpp import LlamaCppRunner

        return LlamaCppRunner(package / manifest.weights, threads)
    from infbench.compression.runtimes.python import load_python_runner

    return load_python_runner(package, manifest.entrypoint, device)
