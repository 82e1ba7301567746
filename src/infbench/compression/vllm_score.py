"""The engine's half of the ``vllm`` likelihood backend's scoring (:mod:`infbench.compression.vllm_likelihood`):
``python -m infbench.compression.vllm_score JOB.json`` in the interpreter that has vLLM."""

import sys
from pathlib import Path

import numpy as np
import torch

from infbench.compression import divergence, scoring
from infbench.compression.vllm_likelihood import VllmLikelihoodJob, engine, engine_device

if __name__ == "__main__":
    job = VllmLikelihoodJob.model_validate_json(Path(sys.argv[1]).read_text())
    arrays = np.load(job.arrays)
    continuations = arrays["continuations"]
    runner = engine(job)
    collector = divergence.TopCollector(*continuations.shape, job.top_k)
    with torch.inference_mode():
        scores = scoring.score_continuations(
            lambda ids, n_last: runner.score(ids.numpy(), n_last),
            arrays["contexts"],
            continuations,
            batch_size=job.batch_size,
            observe=collector,
        )
    top = collector.top
    np.savez(job.out, scores=scores, top_ids=top.ids, top_logprobs=top.logprobs, device=engine_device())
