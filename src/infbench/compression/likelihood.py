"""The BF16 reference likelihood stage: sample continuations, then score them.

Files (per source and set):

The files' formats are :mod:`infbench.compression.likelihood_files`.

- ``continuations.parquet``: ``set, index, family, doc_id, context_ids,
  continuation_ids, logprobs`` (the sampler's own log-probs);
- ``sampling.json``: :class:`SamplingSummary`, PPL from the sampler's log-probs;
  the verification set is sampled with a seed drawn from the operator secret
  (:mod:`infbench.compression.held_out`), and its records carry the secret's label;
- ``reference_scores.parquet``: ``index, logprobs`` teacher-forced by the scorer;
- ``reference_top.npz``: the source's ``likelihood.reference_top_k`` most probable tokens and their log-probs
  at every scored position, from the same forward pass (:class:`TopLogProbs`; the candidates' divergence
  diagnostics, :mod:`infbench.compression.divergence`);
- ``reference.json``: :class:`ReferenceSummary`, the reference ``PPL_D(p)``
  that candidates are compared with, and the self-check ``F`` of the scorer's
  log-probs against the sampler's (1 up to floating point).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from infbench import atomic, provenance
from infbench.compression import contexts as ctx
from infbench.compression import divergence, held_out, sampling, scoring, vllm_likelihood
from infbench.compression.likelihood_files import (
    CONTINUATIONS_SCHEMA,
    SCORES_SCHEMA,
    ReferenceSummary,
    SamplingSummary,
    read_continuations,
    stack,
    write_top,
)
from infbench.hashing import sha256_file
from infbench.hf_loading import load_causal_lm
from infbench.operator_secret import OperatorSecret
from infbench.resources import check_visible_gpus


def _label(set_name: str, secret: OperatorSecret | None) -> str | None:
    if set_name != held_out.VERIFICATION:
        return None
    if secret is None:
        raise ValueError("records of the verification set name the operator secret it was drawn from")
    return secret.label


def check_devices(backend: str, device: str, tensor_parallel: int) -> None:
    """The job must see the GPUs its config asks for (under SLURM: the ones it was given); vLLM on ``cpu`` runs
    its CPU build (docs/vllm.md)."""
    if backend == "vllm" and device != "cpu":
        check_visible_gpus(tensor_parallel, "likelihood.tensor_parallel")
    elif device.startswith("cuda"):
        check_visible_gpus(1, "likelihood.device")


def sample_set(
    source: str,
    checkpoint: str,
    contexts_parquet: str,
    set_name: str,
    out_parquet: str,
    out_summary: str,
    *,
    backend: str,
    n_tokens: int,
    temperature: float,
    seed: int,
    batch_size: int,
    dtype: str,
    device: str,
    tensor_parallel: int = 1,
    cuda_graphs: bool = True,
    vllm_kv_cache_mib: int | None = None,
    threads: int | None = None,
    secret: OperatorSecret | None = None,
) -> SamplingSummary:
    """``seed``: ``likelihood.seed``; the verification set samples with a seed drawn from it and ``secret``."""
    if threads:
        torch.set_num_threads(threads)
    check_devices(backend, device, tensor_parallel)
    draw_seed = held_out.sampling_seed(set_name, source, seed, secret)
    table = ctx.read_contexts(contexts_parquet, set_name)
    contexts = stack(table["token_ids"], np.int32)
    indices = table["index"].tolist()
    if backend == "vllm":
        result, used_device = vllm_likelihood.sample(
            contexts,
            checkpoint=checkpoint,
            indices=indices,
            set_name=set_name,
            n_tokens=n_tokens,
            temperature=temperature,
            seed=draw_seed,
            batch_size=batch_size,
            dtype=dtype,
            tensor_parallel=tensor_parallel,
            kv_cache_mib=vllm_kv_cache_mib,
        )
    else:
        model = load_causal_lm(checkpoint, dtype, device)
        used_device = str(next(model.parameters()).device)
        result = sampling.sample_transformers(
            model,
            contexts,
            indices,
            set_name=set_name,
            n_tokens=n_tokens,
            temperature=temperature,
            seed=draw_seed,
            batch_size=batch_size,
            cuda_graphs=cuda_graphs,
        )
    frame = pd.DataFrame(
        {
            "set": set_name,
            "index": table["index"].astype("int32"),
            "family": table["family"],
            "doc_id": table["doc_id"],
            "context_ids": list(contexts),
            "continuation_ids": list(result.tokens),
            "logprobs": list(result.logprobs),
        }
    )
    atomic.write_parquet(out_parquet, frame, CONTINUATIONS_SCHEMA)
    summary = SamplingSummary(
        source=source,
        set=set_name,
        backend=backend,
        dtype=dtype,
        device=used_device,
        n_contexts=len(frame),
        context_tokens=contexts.shape[1],
        continuation_tokens=n_tokens,
        temperature=temperature,
        seed=seed,
        secret_label=_label(set_name, secret),
        batch_size=batch_size,
        cross_entropy=scoring.cross_entropy(result.logprobs),
        ppl=scoring.perplexity(result.logprobs),
        provenance=provenance.collect(
            {
                "backend": backend,
                "n_tokens": n_tokens,
                "temperature": temperature,
                "seed": seed,
                "batch_size": batch_size,
                "dtype": dtype,
                "device": device,
                "cuda_graphs": cuda_graphs,
                "tensor_parallel": tensor_parallel,
                "vllm_kv_cache_mib": vllm_kv_cache_mib,
                "secret": secret.public() if set_name == held_out.VERIFICATION else None,
            },
            {"contexts.parquet": sha256_file(contexts_parquet)},
        ),
    )
    atomic.write_json(out_summary, summary.model_dump(mode="json"))
    return summary


def score_reference(
    source: str,
    checkpoint: str,
    continuations_parquet: str,
    out_parquet: str,
    out_summary: str,
    out_top: str,
    *,
    top_k: int,
    backend: str,
    batch_size: int,
    dtype: str,
    device: str,
    bootstrap_resamples: int,
    seed: int,
    tensor_parallel: int = 1,
    vllm_kv_cache_mib: int | None = None,
    threads: int | None = None,
    secret: OperatorSecret | None = None,
) -> ReferenceSummary:
    if threads:
        torch.set_num_threads(threads)
    check_devices(backend, device, tensor_parallel)
    table = read_continuations(continuations_parquet)
    contexts = stack(table["context_ids"], np.int32)
    continuations = stack(table["continuation_ids"], np.int32)
    sampler_logprobs = stack(table["logprobs"], np.float32)
    if backend == "vllm":
        scored, top, _ = vllm_likelihood.score(
            contexts,
            continuations,
            checkpoint=checkpoint,
            top_k=top_k,
            batch_size=batch_size,
            dtype=dtype,
            tensor_parallel=tensor_parallel,
            kv_cache_mib=vllm_kv_cache_mib,
        )
    else:
        model = load_causal_lm(checkpoint, dtype, device)
        collector = divergence.TopCollector(*continuations.shape, top_k)
        scored = scoring.score_continuations(
            scoring.hf_logits_fn(model),
            contexts,
            continuations,
            batch_size=batch_size,
            device=next(model.parameters()).device,
            observe=collector,
        )
        top = collector.top
    write_top(out_top, table["index"].to_numpy(), top)
    set_name = str(table["set"].iloc[0])
    atomic.write_parquet(
        out_parquet, pd.DataFrame({"index": table["index"].astype("int32"), "logprobs": list(scored)}), SCORES_SCHEMA
    )
    summary = ReferenceSummary(
        source=source,
        set=set_name,
        backend=backend,
        dtype=dtype,
        n_contexts=len(table),
        tokens_scored=int(scored.size),
        cross_entropy=scoring.cross_entropy(scored),
        ppl=scoring.perplexity(scored),
        sampler_ppl=scoring.perplexity(sampler_logprobs),
        f_self=scoring.ppl_ratio(sampler_logprobs, scored),
        f_self_ci95=scoring.bootstrap_ppl_ratio(sampler_logprobs, scored, n_resamples=bootstrap_resamples, seed=seed),
        max_abs_logprob_diff=float(np.max(np.abs(scored - sampler_logprobs))),
        secret_label=_label(set_name, secret),
        provenance=provenance.collect(
            {
                "backend": backend,
                "top_k": top_k,
                "batch_size": batch_size,
                "dtype": dtype,
                "device": device,
                "tensor_parallel": tensor_parallel,
                "vllm_kv_cache_mib": vllm_kv_cache_mib,
                "bootstrap_resamples": bootstrap_resamples,
                "seed": seed,
            },
            {"continuations.parquet": sha256_file(continuations_parquet)},
        ),
    )
    atomic.write_json(out_summary, summary.model_dump(mode="json"))
    return summary
