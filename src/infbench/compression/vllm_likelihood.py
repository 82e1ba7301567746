"""The likelihood stage's ``vllm`` backend: vLLM 0.32.0 computes the source's raw logits, and the pipeline samples
and scores from them with the code the ``transformers`` backend uses (:func:`infbench.compression.sampling.
sample_causal`: each context's own uniforms and exact inverse-CDF draw; :func:`infbench.compression.scoring.
score_continuations` with :class:`infbench.compression.divergence.TopCollector`). The engine is the ``vllm``
package runtime's (:class:`infbench.compression.runtimes.vllm.VllmRunner`), on CPUs and GPUs alike.

vLLM pins its own torch and transformers, so the engine's half runs in an interpreter that has vLLM
(:func:`infbench.vllm_env.python_with_vllm`): ``python -m infbench.compression.vllm_sample JOB.json`` (or
``vllm_score``: two modules, so that the sampling job's code is not the scorer's) reads a
:class:`VllmLikelihoodJob` and writes its arrays (``.npz``); :func:`sample` and :func:`score` start it from the
pipeline's interpreter and read them back.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from infbench.compression.likelihood_files import TopLogProbs
from infbench.compression.sampling import Samples


class VllmLikelihoodJob(BaseModel):
    """One sampling or scoring pass through vLLM. ``arrays``: an ``.npz`` with ``contexts`` (and ``continuations``
    to score); ``out``: the ``.npz`` written (``tokens``, ``logprobs``; or ``scores``, ``top_ids``,
    ``top_logprobs``; and ``device``, the engine's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    checkpoint: str
    arrays: str
    out: str
    dtype: str
    batch_size: int
    tensor_parallel: int = 1
    kv_cache_mib: int | None = None
    # sample
    set_name: str = ""
    indices: list[int] = []
    n_tokens: int = 0
    temperature: float = 1.0
    seed: int = 0
    # score
    top_k: int = 0


def _through_vllm(module: tuple[str, str], job: dict, **arrays: np.ndarray) -> dict[str, np.ndarray]:
    """Run ``job`` (the fields of a :class:`VllmLikelihoodJob` less its files) by ``module`` (``("-m", name)``)
    in vLLM's interpreter, its output copied to this process's standard error; the arrays it wrote."""
    from infbench.vllm_env import python_with_vllm

    with tempfile.TemporaryDirectory(prefix="infbench-vllm-likelihood-") as tmp:
        np.savez(f"{tmp}/in.npz", **arrays)
        spec = VllmLikelihoodJob(**job, arrays=f"{tmp}/in.npz", out=f"{tmp}/out.npz")
        Path(f"{tmp}/job.json").write_text(spec.model_dump_json())
        src = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
        cmd = [str(python_with_vllm()), *module, f"{tmp}/job.json"]
        done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        print(done.stdout, file=sys.stderr)
        if done.returncode != 0:
            raise RuntimeError(f"{module[1]} failed with exit code {done.returncode}: {done.stdout[-3000:]}")
        with np.load(spec.out) as out:
            return {k: out[k] for k in out.files}


def sample(contexts: np.ndarray, **job) -> tuple[Samples, str]:
    """Continuations of ``contexts`` drawn from vLLM's logits; the engine's device."""
    out = _through_vllm(("-m", "infbench.compression.vllm_sample"), job, contexts=contexts)
    return Samples(out["tokens"], out["logprobs"]), str(out["device"])


def score(contexts: np.ndarray, continuations: np.ndarray, **job) -> tuple[np.ndarray, TopLogProbs, str]:
    """Teacher-forced log-probs of ``continuations`` and the ``top_k`` most probable tokens at every scored
    position, from vLLM's logits; the engine's device."""
    module = ("-m", "infbench.compression.vllm_score")
    out = _through_vllm(module, job, contexts=contexts, continuations=continuations)
    return out["scores"], TopLogProbs(out["top_ids"], out["top_logprobs"]), str(out["device"])


def engine(job: VllmLikelihoodJob):
    """vLLM over the job's checkpoint (in the interpreter that has vLLM)."""
    from infbench.compression.runtimes.vllm import VllmRunner

    return VllmRunner(
        Path(job.checkpoint),
        "auto",
        kv_cache_mib=job.kv_cache_mib,
        dtype=job.dtype,
        tensor_parallel=job.tensor_parallel,
    )


def engine_device() -> str:
    from vllm.platforms import current_platform

    return str(current_platform.device_type)
