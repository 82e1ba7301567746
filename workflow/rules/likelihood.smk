# The BF16 reference likelihood (PROTOCOL A3): context sets, sampled continuations and teacher-forced
# reference scores. The search set follows the public seeds; the verification set is drawn from the operator
# secret (compression/held_out.py), after the search set and from the documents it left.


rule contexts:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        record=LAYOUT.source_record("{source}"),
        drawn_before=sets_drawn_before,
    output:
        contexts=LAYOUT.contexts("{source}", "{set}"),
        manifest=LAYOUT.contexts_manifest("{source}", "{set}"),
    log:
        "logs/contexts/{source}/{set}.log",
    benchmark:
        "benchmarks/contexts/{source}/{set}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        code=code("contexts"),
        corpus=CFG.likelihood.corpus.model_dump(mode="json"),
        contexts_per_set=CFG.likelihood.contexts_per_set,
        context_tokens=CFG.likelihood.context_tokens,
        continuation_tokens=CFG.likelihood.continuation_tokens,
        seed=CFG.likelihood.context_seed,
        secret=secret_of_set,
    script:
        "../scripts/contexts.py"


rule sample_continuations:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        contexts=LAYOUT.contexts("{source}", "{set}"),
    output:
        continuations=LAYOUT.continuations("{source}", "{set}"),
        summary=LAYOUT.sampling_summary("{source}", "{set}"),
    log:
        "logs/sample_continuations/{source}/{set}.log",
    benchmark:
        "benchmarks/sample_continuations/{source}/{set}.tsv"
    conda:
        LIKELIHOOD_ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=gpus("sample_continuations"),
    params:
        code=code("sample_continuations"),
        backend=CFG.likelihood.backend,
        n_tokens=CFG.likelihood.continuation_tokens,
        temperature=CFG.likelihood.temperature,
        seed=CFG.likelihood.seed,
        batch_size=CFG.likelihood.sample_batch_size,
        cuda_graphs=CFG.likelihood.cuda_graphs,
        dtype=CFG.likelihood.dtype,
        device=CFG.likelihood.device,
        tensor_parallel=CFG.likelihood.tensor_parallel,
        vllm_kv_cache_mib=CFG.likelihood.vllm_kv_cache_mib,
        secret=secret_of_set,
    script:
        "../scripts/sample_continuations.py"


rule score_reference:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        continuations=LAYOUT.continuations("{source}", "{set}"),
    output:
        scores=LAYOUT.reference_scores("{source}", "{set}"),
        summary=LAYOUT.reference_summary("{source}", "{set}"),
        top=LAYOUT.reference_top("{source}", "{set}"),
    log:
        "logs/score_reference/{source}/{set}.log",
    benchmark:
        "benchmarks/score_reference/{source}/{set}.tsv"
    conda:
        LIKELIHOOD_ENV
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=gpus("score_reference"),
    params:
        code=code("score_reference"),
        top_k=CFG.likelihood.reference_top_k,
        backend=CFG.likelihood.backend,
        batch_size=CFG.likelihood.score_batch_size,
        dtype=CFG.likelihood.dtype,
        device=CFG.likelihood.device,
        tensor_parallel=CFG.likelihood.tensor_parallel,
        vllm_kv_cache_mib=CFG.likelihood.vllm_kv_cache_mib,
        bootstrap_resamples=CFG.likelihood.bootstrap_resamples,
        seed=CFG.likelihood.seed,
        secret=secret_of_set,
    script:
        "../scripts/score_reference.py"
