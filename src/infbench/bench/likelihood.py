"""Scorer throughput vs a bare batched forward pass, and sampling throughput.

The bare forward pass is ``model(ids).logits`` on exactly the token batches the
scorer feeds (context + continuation[:-1]); the scorer adds log-softmax and
the gather of the sampled tokens but only sends the continuation positions
through the output head (``logits_to_keep``). Target: scorer >= 90% of bare.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from infbench import atomic
from infbench.compression import sampling, scoring
from infbench.compression.hf_runtime import load_causal_lm


def _best_of(repeats: int, fn) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def run(checkpoint: str, *, contexts: int, context_tokens: int, continuation_tokens: int, batch_size: int,
        dtype: str, repeats: int, threads: int | None = None, out_md: str | None = None) -> str:
    if threads:
        torch.set_num_threads(threads)
    model = load_causal_lm(checkpoint, dtype, "auto")
    device = next(model.parameters()).device
    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    ctx = rng.integers(0, vocab, size=(contexts, context_tokens), dtype=np.int32)
    cont = rng.integers(0, vocab, size=(contexts, continuation_tokens), dtype=np.int32)
    scored_tokens = contexts * continuation_tokens
    fed_tokens = contexts * (context_tokens + continuation_tokens - 1)

    @torch.inference_mode()
    def bare():
        for start in range(0, contexts, batch_size):
            ids = np.concatenate([ctx[start:start + batch_size], cont[start:start + batch_size, :-1]], axis=1)
            model(input_ids=torch.as_tensor(ids, dtype=torch.long, device=device), use_cache=False).logits

    def scorer():
        scoring.score_continuations(scoring.hf_logits_fn(model), ctx, cont, batch_size=batch_size,
                                    device=device, progress=False)

    bare(), scorer()  # warm-up
    t_bare = _best_of(repeats, bare)
    t_score = _best_of(repeats, scorer)
    n_sample = min(contexts, batch_size)
    sample_steps = min(continuation_tokens, 64)
    t_sample = _best_of(1, lambda: sampling.sample_transformers(
        model, ctx[:n_sample], list(range(n_sample)), set_name="bench", n_tokens=sample_steps, temperature=1.0,
        seed=0, batch_size=batch_size, progress=False))
    table = pd.DataFrame([
        {"what": "bare forward (model(ids).logits)", "tokens": fed_tokens, "seconds": t_bare,
         "tokens_per_s": fed_tokens / t_bare},
        {"what": "scorer (teacher-forced log-probs)", "tokens": fed_tokens, "seconds": t_score,
         "tokens_per_s": fed_tokens / t_score},
        {"what": f"sampling (batch {n_sample}, new tokens)", "tokens": n_sample * sample_steps,
         "seconds": t_sample, "tokens_per_s": n_sample * sample_steps / t_sample},
    ])
    ratio = t_bare / t_score
    text = (f"model {checkpoint} ({dtype}, {device}, {torch.get_num_threads()} threads); "
            f"{contexts} contexts x ({context_tokens} + {continuation_tokens}) tokens, batch {batch_size}, "
            f"best of {repeats}; {scored_tokens} tokens scored\n\n"
            + table.to_markdown(index=False, floatfmt=".3f")
            + f"\n\nscorer / bare forward throughput: {ratio:.1%} (target >= 90%)\n")
    if out_md:
        atomic.write_text(out_md, text)
    return text
