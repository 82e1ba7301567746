"""What a job asks a scheduler for, derived from the config.

Rules declare ``threads:`` and ``resources:`` (``mem_mb``, ``runtime`` in
minutes, ``gpu``); the SLURM executor turns them into ``--mem``, ``-t``,
``--cpus-per-task`` and ``--gpus``. GPU counts come from here because they
depend on the source (a MoE source samples on ``tensor_parallel`` GPUs, a
dense one on one); memory and runtime at paper scale come from the workflow
profile ``profiles/paper``.
"""

from __future__ import annotations

import os
from typing import Any

from infbench.errors import ConfigError


def likelihood_gpus(likelihood: dict[str, Any]) -> int:
    """GPUs a sampling or scoring job needs: vLLM uses ``tensor_parallel`` of them,
    transformers on ``cuda``/``cuda:N`` one, on ``cpu`` or ``auto`` none (``auto``
    uses a GPU only if the job is given one)."""
    if likelihood["backend"] == "vllm":
        return int(likelihood["tensor_parallel"])
    device = likelihood["device"]
    if device.startswith("cuda"):
        if device != "cuda" and int(device.split(":")[1]) != 0:
            raise ConfigError("likelihood.device",
                              f"'{device}': a job sees only the GPUs it is given, counted from 0; use 'cuda'")
        return 1
    return 0


def check_visible_gpus(needed: int, key: str) -> None:
    """Stop with a clear message when fewer GPUs are visible than the job needs."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < needed:
        raise ConfigError(key, f"needs {needed} GPU(s) but {visible} are visible "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
