"""What a job asks a scheduler for, derived from the config.

Rules declare ``threads:`` and ``resources:`` (``mem_mb``, ``runtime`` in
minutes, ``gpu``); the SLURM executor turns them into ``--mem``, ``-t``,
``--cpus-per-task`` and ``--gpus``. GPU counts come from here because they
depend on the config: a rule runs on CUDA when its device key says so
(:data:`GPU_RULES`), and then asks for the GPUs that hold its source in BF16
(``sources.<name>.devices``: a MoE source 2, a dense one 1) or, with vLLM,
``likelihood.tensor_parallel``. Memory and runtime at paper scale come from
the workflow profile ``profiles/paper`` (docs/paper_scale.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from infbench.errors import ConfigError

if TYPE_CHECKING:
    from infbench.config.model import Config, LikelihoodSettings

# Rules that can run on a GPU -> the config key that says whether they do. A rule not named here
# never asks for a GPU.
GPU_RULES: dict[str, str] = {
    "sample_continuations": "likelihood.device",
    "score_reference": "likelihood.device",
    "gptq_baseline": "compression.gptq.device",
    "gptq_variant": "compression.gptq.device",
    "gguf_imatrix": "likelihood.device",
    "answers_reference": "answers.device",
    "measure_candidate": "verification.device",
    "reference_search": "verification.device",
    "serving_calibrate": "serving.deployment.accelerator",
    "serving_baseline": "serving.deployment.accelerator",
    "serving_replay": "serving.deployment.accelerator",
    "serving_verify": "serving.deployment.accelerator",
}


def device_gpus(device: str, key: str, devices: int = 1) -> int:
    """GPUs a job on ``device`` needs: ``cuda``/``cuda:0`` ``devices``, ``cpu`` or ``auto`` none (``auto``
    uses a GPU only if the job is given one). ``cuda:N`` with N > 0 names a GPU outside the job's
    allocation, whose GPUs are counted from 0."""
    if device.startswith("cuda"):
        if device != "cuda" and int(device.split(":")[1]) != 0:
            raise ConfigError(key, f"'{device}': a job sees only the GPUs it is given, counted from 0; use 'cuda'")
        return devices
    return 0


def likelihood_gpus(likelihood: LikelihoodSettings, devices: int = 1) -> int:
    """GPUs a sampling or scoring job needs: vLLM uses ``tensor_parallel`` of them (none on ``cpu``, its CPU
    build), transformers on ``cuda``/``cuda:N`` the source's ``devices``, on ``cpu`` or ``auto`` none."""
    if likelihood.backend == "vllm" and likelihood.device != "cpu":
        return likelihood.tensor_parallel
    return device_gpus(likelihood.device, "likelihood.device", devices)


def job_gpus(cfg: Config, rule: str, source: str | None = None) -> int:
    """GPUs a job of ``rule`` (for ``source``) asks for; 0 for a rule outside :data:`GPU_RULES`."""
    key = GPU_RULES.get(rule)
    if key is None:
        return 0
    if key.startswith("serving."):
        deployment = cfg.serving.deployment
        return deployment.devices if deployment.accelerator == "gpu" else 0
    devices = cfg.sources[source].devices
    if key == "likelihood.device":
        return likelihood_gpus(cfg.likelihood, devices)
    if key == "compression.gptq.device":
        # GPTQModel quantizes one decoder layer at a time: one GPU, whatever the source's size.
        return 1 if cfg.compression.gptq.device == "cuda" else 0
    section, field = key.split(".")
    return device_gpus(getattr(getattr(cfg, section), field), key, devices)


def gpu_key(cfg: Config, rule: str) -> str:
    """The config key that sets ``rule``'s GPU count (for error messages)."""
    key = GPU_RULES[rule]
    if key == "likelihood.device" and cfg.likelihood.backend == "vllm":
        return "likelihood.tensor_parallel"
    return key


def requested_gpus(resources: Mapping[str, Any]) -> int | None:
    """GPUs a rule's resource settings ask for: ``gpu: N``, or a ``gres`` with ``gpu:N`` /
    ``gpu:<model>:N`` (the SLURM executor's two forms); None when neither is set or the value is an
    expression evaluated per job."""
    gpu = resources.get("gpu")
    if gpu is not None:
        try:
            return int(gpu)
        except (TypeError, ValueError):
            return None
    gres = resources.get("gres")
    if isinstance(gres, str):
        for part in gres.split(","):
            if m := re.fullmatch(r"\s*gpu(?::[^:,]+)?:(\d+)\s*", part):
                return int(m.group(1))
    return None


def check_visible_gpus(needed: int, key: str) -> None:
    """Stop with a clear message when fewer GPUs are visible than the job needs."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < needed:
        raise ConfigError(
            key,
            f"needs {needed} GPU(s) but {visible} are visible "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})",
        )
