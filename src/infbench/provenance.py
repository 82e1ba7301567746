"""What produced an output: package versions, git commit, platform, parameters."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

TRACKED_DISTRIBUTIONS = (
    "infbench", "torch", "transformers", "gguf", "safetensors", "tokenizers",
    "numpy", "pandas", "pyarrow", "snakemake", "llama-cpp-python", "vllm", "sglang",
    "httpx", "starlette", "uvicorn",
)


class Provenance(BaseModel):
    infbench_git_commit: str | None
    infbench_git_dirty: bool | None
    python: str
    platform: str
    versions: dict[str, str]
    execution: dict[str, str] = {}
    params: dict[str, Any]
    inputs: dict[str, str]


EXECUTION_ENV = ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "CUDA_VISIBLE_DEVICES")


def execution() -> dict[str, str]:
    """Where a job ran: host, and its SLURM job and GPUs when it had them."""
    found = {"host": platform.node()}
    found.update({k.lower(): os.environ[k] for k in EXECUTION_ENV if k in os.environ})
    return found


def package_versions() -> dict[str, str]:
    found = {}
    for name in TRACKED_DISTRIBUTIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=Path(__file__).resolve().parent,
            capture_output=True, text=True, timeout=10, check=True,
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
        execution=execution(),
        params=params,
        inputs=inputs or {},
    )
