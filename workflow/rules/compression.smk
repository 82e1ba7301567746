# CompressionBench candidates (PROTOCOL A6), final verification (A5) and tables.


rule bf16_package:
    input:
        checkpoint=source_dir,
    output:
        directory("results/candidates/{source}/bf16"),
    params:
        code=code("bf16_package"),
    log:
        "logs/bf16_package/{source}.log",
    benchmark:
        "benchmarks/bf16_package/{source}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/bf16_package.py"


rule starter_submission:
    input:
        checkpoint=source_dir,
        code=STARTER_CODE,
    output:
        directory("results/candidates/{source}/starter"),
    params:
        code=code("starter_submission"),
    log:
        "logs/starter_submission/{source}.log",
    benchmark:
        "benchmarks/starter_submission/{source}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/starter_submission.py"


rule gguf_baseline:
    input:
        gguf="results/sources/{source}/f16.gguf",
        checkpoint=source_dir,
    output:
        directory("results/candidates/{source}/gguf-{qtype}"),
    params:
        code=code("gguf_baseline"),
    log:
        "logs/gguf_baseline/{source}/{qtype}.log",
    benchmark:
        "benchmarks/gguf_baseline/{source}/{qtype}.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=30,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/gguf_baseline.py"


rule released_gguf:
    input:
        gguf=lambda wc: COMPRESSION["released_gguf"][wc.name]["path"],
        checkpoint=source_dir,
    output:
        directory("results/candidates/{source}/released-{name}"),
    params:
        code=code("released_gguf"),
    log:
        "logs/released_gguf/{source}/{name}.log",
    benchmark:
        "benchmarks/released_gguf/{source}/{name}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/released_gguf.py"


rule gptq_baseline:
    input:
        checkpoint=source_dir,
        contexts="results/likelihood/{source}/search/contexts.parquet",
    output:
        package=directory("results/candidates/{source}/gptq-{limit}gib"),
        record="results/compression/{source}/gptq-{limit}gib.json",
    params:
        code=code("gptq_baseline"),
        corpus=config["likelihood"]["corpus"],
        # the device decides where GPTQModel quantizes, not what it writes: changing it reruns nothing
        gptq={k: v for k, v in COMPRESSION["gptq"].items() if k != "device"},
    log:
        "logs/gptq_baseline/{source}/{limit}.log",
    benchmark:
        "benchmarks/gptq_baseline/{source}/{limit}.tsv"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=120,
        gpu=gpus("gptq_baseline"),
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/gptq_baseline.py"


rule measure_candidate:
    input:
        package=candidate_package,
        checkpoint=source_dir,
        record="results/sources/{source}/source.json",
        continuations="results/likelihood/{source}/verification/continuations.parquet",
        reference="results/likelihood/{source}/verification/reference_scores.parquet",
        answers_reference="results/answers/{source}/reference.json",
    output:
        "results/compression/{source}/measured/{candidate}.json",
    params:
        code=candidate_code,
        package=candidate_dir,
        settings=config["verification"],
        sandbox=config["sandbox"],
        answers=config["answers"],
        temperature=config["likelihood"]["temperature"],
        secret=OPERATOR_SECRET.fingerprint,
        # the sandbox's hard memory limit starts from the largest storage limit the candidate is judged under
        memory_limit_gib=lambda wc: max(t.limit_gib for t in TASKS.values() if t.source == wc.source),
    log:
        "logs/measure_candidate/{source}/{candidate}.log",
    benchmark:
        "benchmarks/measure_candidate/{source}/{candidate}.tsv"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=VERIFICATION_MINUTES,
        gpu=gpus("measure_candidate"),
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/measure_candidate.py"


rule verify:
    input:
        lambda wc: f"results/compression/{TASKS[wc.task].source}/measured/{wc.candidate}.json",
    output:
        "results/compression/verification/{task}/{candidate}.json",
    params:
        code=code("verify"),
        task=lambda wc: TASKS[wc.task].model_dump(),
        secret=OPERATOR_SECRET.fingerprint,
    log:
        "logs/verify/{task}/{candidate}.log",
    benchmark:
        "benchmarks/verify/{task}/{candidate}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/verify.py"


# Every final verification record: one per task and candidate.
COMPRESSION_RECORDS = [
    f"results/compression/verification/{name}/{candidate}.json"
    for name, task in TASKS.items()
    for candidate in candidates(task.source)
]


rule compression_table:
    input:
        records=COMPRESSION_RECORDS,
        sources=expand("results/sources/{source}/source.json", source=SOURCES),
    params:
        code=code("compression_table"),
        config={
            "tasks": config["tasks"],
            "compression": COMPRESSION,
            "verification": config["verification"],
            "answers": config["answers"],
        },
        labels={  # a run's final submission is labelled with its agent (runs.smk)
            f"results/compression/verification/{name}/{c}.json": RUN_CANDIDATES[c].label
            for name, task in TASKS.items()
            for c in candidates(task.source)
            if c in RUN_CANDIDATES
        },
    output:
        csv=report(
            "results/tables/compression.csv",
            caption="../report/compression_table.rst",
            category="CompressionBench",
            subcategory="Final verification",
        ),
        md="results/tables/compression.md",
        provenance="results/tables/compression.provenance.json",
        plot=report(
            "results/plots/accuracy_vs_bits.png",
            caption="../report/accuracy_vs_bits.rst",
            category="CompressionBench",
            subcategory="Final verification",
        ),
        plot_data="results/plots/accuracy_vs_bits.csv",
    log:
        "logs/tables/compression.log",
    benchmark:
        "benchmarks/compression_table.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/compression_table.py"
