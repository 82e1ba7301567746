# The BF16 reference likelihood (PROTOCOL A3): context sets, sampled
# continuations and teacher-forced reference scores. The search set follows the
# public seeds; the verification set is drawn from the operator secret
# (compression/held_out.py), after the search set and from the documents it left.


rule contexts:
    input:
        checkpoint=source_dir,
        record="results/sources/{source}/source.json",
        drawn_before=sets_drawn_before,
    output:
        contexts="results/likelihood/{source}/{set}/contexts.parquet",
        manifest="results/likelihood/{source}/{set}/contexts.json",
    params:
        code=code("contexts"),
        corpus=config["likelihood"]["corpus"],
        contexts_per_set=config["likelihood"]["contexts_per_set"],
        context_tokens=config["likelihood"]["context_tokens"],
        continuation_tokens=config["likelihood"]["continuation_tokens"],
        seed=config["likelihood"]["context_seed"],
        secret=secret_of_set,
    log:
        "logs/contexts/{source}/{set}.log",
    benchmark:
        "benchmarks/contexts/{source}/{set}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/contexts.py"


rule sample_continuations:
    input:
        checkpoint=source_dir,
        contexts="results/likelihood/{source}/{set}/contexts.parquet",
    output:
        continuations="results/likelihood/{source}/{set}/continuations.parquet",
        summary="results/likelihood/{source}/{set}/sampling.json",
    params:
        code=code("sample_continuations"),
        backend=config["likelihood"]["backend"],
        n_tokens=config["likelihood"]["continuation_tokens"],
        temperature=config["likelihood"]["temperature"],
        seed=config["likelihood"]["seed"],
        batch_size=config["likelihood"]["sample_batch_size"],
        cuda_graphs=config["likelihood"]["cuda_graphs"],
        dtype=config["likelihood"]["dtype"],
        device=config["likelihood"]["device"],
        tensor_parallel=config["likelihood"]["tensor_parallel"],
        secret=secret_of_set,
    log:
        "logs/sample_continuations/{source}/{set}.log",
    benchmark:
        "benchmarks/sample_continuations/{source}/{set}.tsv"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=gpus("sample_continuations"),
    conda:
        LIKELIHOOD_ENV
    script:
        "../scripts/sample_continuations.py"


rule score_reference:
    input:
        checkpoint=source_dir,
        continuations="results/likelihood/{source}/{set}/continuations.parquet",
    output:
        scores="results/likelihood/{source}/{set}/reference_scores.parquet",
        summary="results/likelihood/{source}/{set}/reference.json",
    params:
        code=code("score_reference"),
        backend=config["likelihood"]["backend"],
        batch_size=config["likelihood"]["score_batch_size"],
        dtype=config["likelihood"]["dtype"],
        device=config["likelihood"]["device"],
        tensor_parallel=config["likelihood"]["tensor_parallel"],
        bootstrap_resamples=config["likelihood"]["bootstrap_resamples"],
        seed=config["likelihood"]["seed"],
        secret=secret_of_set,
    log:
        "logs/score_reference/{source}/{set}.log",
    benchmark:
        "benchmarks/score_reference/{source}/{set}.tsv"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=gpus("score_reference"),
    conda:
        LIKELIHOOD_ENV
    script:
        "../scripts/score_reference.py"
