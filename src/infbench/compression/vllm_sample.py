"""The engine's half of the ``vllm`` likelihood backend's sampling (:mod:`infbench.compression.vllm_likelihood`):
``python -m infbench.compression.vllm_sample JOB.json`` in the interpreter that has vLLM."""

import sys
from pathlib import Path

import numpy as np
import torch

from infbench.compression import sampling
from infbench.compression.vllm_likelihood import VllmLikelihoodJob, engine, engine_device

if __name__ == "__main__":
    job = VllmLikelihoodJob.model_validate_json(Path(sys.argv[1]).read_text())
    with torch.inference_mode():
        drawn = sampling.sample_causal(
            engine(job),
            np.load(job.arrays)["contexts"],
            job.indices,
            set_name=job.set_name,
            n_tokens=job.n_tokens,
            temperature=job.temperature,
            seed=job.seed,
            batch_size=job.batch_size,
        )
    np.savez(job.out, tokens=drawn.tokens, logprobs=drawn.logprobs, device=engine_device())
