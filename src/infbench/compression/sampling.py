"""Continuation sampling by the BF16 source (PROTOCOL A3).

Each context gets ``M`` tokens sampled at temperature ``T`` with no top-k or
top-p, EOS not stopping the continuation. Every context has its own random
stream (seeded from the base seed, the set and the context index), and a
token is drawn by the Gumbel-max rule ``argmax(log_softmax(z / T) + G)`` with
float64 Gumbel noise, an exact draw from ``softmax(z / T)``. So a context's
continuation does not depend on which other contexts share its batch (up to
the floating-point effects of batching). The stored log-prob of each token is
the source's own, ``log_softmax(z)`` of the raw logits.

Backends: ``transformers`` (CPU or CUDA) and ``vllm`` (optional extra).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from infbench.compression.hf_runtime import cache_kwargs
from infbench.errors import ConfigError
from infbench.seeding import derive_seed


@dataclass(frozen=True)
class Samples:
    tokens: np.ndarray  # [n, M] int32
    logprobs: np.ndarray  # [n, M] float32, the source's own log-probs


def context_seed(seed: int, set_name: str, index: int) -> int:
    return derive_seed(seed, "continuation", set_name, index)


def draw(log_probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row from ``softmax(log_probs)``, row ``i`` using ``generators[i]`` (Gumbel-max)."""
    vocab, device = log_probs.shape[-1], log_probs.device
    u = torch.stack([torch.rand(vocab, generator=g, dtype=torch.float64, device=device) for g in generators])
    gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(torch.float64).tiny)))
    return (log_probs.double() + gumbel).argmax(-1)


@torch.inference_mode()
def sample_transformers(model, contexts: np.ndarray, indices: list[int], *, set_name: str, n_tokens: int,
                        temperature: float, seed: int, batch_size: int, progress: bool = True) -> Samples:
    device = next(model.parameters()).device
    n = contexts.shape[0]
    tokens = np.empty((n, n_tokens), dtype=np.int32)
    logprobs = np.empty((n, n_tokens), dtype=np.float32)
    bar = tqdm(total=n * n_tokens, desc=f"sample {set_name}", unit="tok", disable=not progress)
    for start in range(0, n, batch_size):
        rows = slice(start, min(n, start + batch_size))
        generators = [torch.Generator(device=device).manual_seed(context_seed(seed, set_name, i))
                      for i in indices[rows]]
        out = model(input_ids=torch.as_tensor(contexts[rows], dtype=torch.long, device=device), use_cache=True,
                    logits_to_keep=1)
        for step in range(n_tokens):
            logits = out.logits[:, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            scaled = logp if temperature == 1.0 else torch.log_softmax(logits / temperature, dim=-1)
            token = draw(scaled, generators)
            tokens[rows, step] = token.cpu().numpy()
            logprobs[rows, step] = logp.gather(-1, token.unsqueeze(-1)).squeeze(-1).cpu().numpy()
            bar.update(len(generators))
            if step + 1 < n_tokens:
                out = model(input_ids=token.unsqueeze(-1), use_cache=True, **cache_kwargs(out))
    bar.close()
    return Samples(tokens, logprobs)


def _require_vllm():
    try:
        import vllm
    except ImportError:
        raise ConfigError(
            "likelihood.backend",
            "backend 'vllm' needs the optional extra: pip install -e '.[vllm]' (on a CUDA machine)",
        ) from None
    return vllm


def sample_vllm(checkpoint: str, contexts: np.ndarray, indices: list[int], *, set_name: str, n_tokens: int,
                temperature: float, seed: int, dtype: str, tensor_parallel: int) -> Samples:
    """The same draw through vLLM: raw-logit log-probs, no truncation, EOS ignored."""
    vllm = _require_vllm()
    llm = vllm.LLM(model=checkpoint, dtype=dtype, tensor_parallel_size=tensor_parallel, seed=seed)
    params = [vllm.SamplingParams(n=1, temperature=temperature, top_p=1.0, top_k=-1, min_p=0.0,
                                  max_tokens=n_tokens, min_tokens=n_tokens, ignore_eos=True, logprobs=0,
                                  seed=context_seed(seed, set_name, i) % (2**31))
              for i in indices]
    prompts = [vllm.inputs.TokensPrompt(prompt_token_ids=[int(t) for t in row]) for row in contexts]
    outputs = llm.generate(prompts, params)
    tokens = np.array([o.outputs[0].token_ids for o in outputs], dtype=np.int32)
    logprobs = np.array([[step[t].logprob for step, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)]
                         for o in outputs], dtype=np.float32)
    return Samples(tokens, logprobs)


def score_vllm(checkpoint: str, contexts: np.ndarray, continuations: np.ndarray, *, dtype: str,
               tensor_parallel: int) -> np.ndarray:
    """Teacher-forced log-probs of the continuations through vLLM prompt log-probs."""
    vllm = _require_vllm()
    llm = vllm.LLM(model=checkpoint, dtype=dtype, tensor_parallel_size=tensor_parallel)
    seqs = np.concatenate([contexts, continuations], axis=1)
    prompts = [vllm.inputs.TokensPrompt(prompt_token_ids=[int(t) for t in row]) for row in seqs]
    outputs = llm.generate(prompts, vllm.SamplingParams(max_tokens=1, prompt_logprobs=0))
    m, length = continuations.shape[1], contexts.shape[1]
    return np.array([[o.prompt_logprobs[length + j][int(seq[length + j])].logprob for j in range(m)]
                     for o, seq in zip(outputs, seqs)], dtype=np.float32)
