# CompressionBench candidates, final verification and table (PROTOCOL A5, A6).

# The starter code ships with the workflow, wherever the working directory is.
STARTER_CODE = [
    os.path.join(workflow.basedir, "examples", "starter_submission", name) for name in ("manifest.yaml", "inference.py")
]


rule bf16_package:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
    output:
        directory(LAYOUT.candidate("{source}", "bf16")),
    log:
        "logs/bf16_package/{source}.log",
    benchmark:
        "benchmarks/bf16_package/{source}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("bf16_package"),
    script:
        "../scripts/bf16_package.py"


rule vllm_twin:
    input:
        package=LAYOUT.candidate("{source}", "{candidate}"),
    output:
        directory(LAYOUT.candidate("{source}", "{candidate}-vllm")),
    log:
        "logs/vllm_twin/{source}/{candidate}.log",
    benchmark:
        "benchmarks/vllm_twin/{source}/{candidate}.tsv"
    wildcard_constraints:
        candidate="|".join(re.escape(c) for c in CFG.compression.vllm_twins) or "(?!)",
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=code("vllm_twin"),
    script:
        "../scripts/vllm_twin.py"


rule starter_submission:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        code=STARTER_CODE,
    output:
        directory(LAYOUT.candidate("{source}", "starter")),
    log:
        "logs/starter_submission/{source}.log",
    benchmark:
        "benchmarks/starter_submission/{source}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("starter_submission"),
    script:
        "../scripts/starter_submission.py"


rule gguf_baseline:
    input:
        gguf=LAYOUT.source_gguf("{source}"),
        checkpoint=LAYOUT.checkpoint("{source}"),
    output:
        package=directory(LAYOUT.candidate("{source}", "gguf-{qtype}")),
        record=LAYOUT.gguf_record("{source}", "gguf-{qtype}"),
    log:
        "logs/gguf_baseline/{source}/{qtype}.log",
    benchmark:
        "benchmarks/gguf_baseline/{source}/{qtype}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=30,
    params:
        code=code("gguf_baseline"),
    script:
        "../scripts/gguf_baseline.py"


# The source's importance matrix (llama.cpp's imatrix format) from activation hooks on its forward passes over
# calibration text, where the likelihood sets' forward passes run (likelihood.device).
rule gguf_imatrix:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        gguf=LAYOUT.source_gguf("{source}"),
        contexts=LAYOUT.contexts("{source}", "search"),
    output:
        imatrix=LAYOUT.imatrix("{source}"),
        record=LAYOUT.imatrix_record("{source}"),
    log:
        "logs/gguf_imatrix/{source}.log",
    benchmark:
        "benchmarks/gguf_imatrix/{source}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus("gguf_imatrix"),
    params:
        code=code("gguf_imatrix"),
        settings=CFG.compression.imatrix.model_dump(mode="json"),
        corpus=CFG.likelihood.corpus.model_dump(mode="json"),
        device=CFG.likelihood.device,
    script:
        "../scripts/gguf_imatrix.py"


rule gguf_imatrix_baseline:
    input:
        gguf=LAYOUT.source_gguf("{source}"),
        checkpoint=LAYOUT.checkpoint("{source}"),
        imatrix=LAYOUT.imatrix("{source}"),
    output:
        package=directory(LAYOUT.candidate("{source}", "gguf-{qtype}-imatrix")),
        record=LAYOUT.gguf_record("{source}", "gguf-{qtype}-imatrix"),
    log:
        "logs/gguf_imatrix_baseline/{source}/{qtype}.log",
    benchmark:
        "benchmarks/gguf_imatrix_baseline/{source}/{qtype}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=30,
    params:
        code=code("gguf_baseline"),
    script:
        "../scripts/gguf_baseline.py"


rule released_gguf:
    input:
        gguf=lambda wc: CFG.compression.released_gguf[wc.name].path,
        checkpoint=LAYOUT.checkpoint("{source}"),
    output:
        directory(LAYOUT.candidate("{source}", "released-{name}")),
    log:
        "logs/released_gguf/{source}/{name}.log",
    benchmark:
        "benchmarks/released_gguf/{source}/{name}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("released_gguf"),
    script:
        "../scripts/released_gguf.py"


rule gptq_baseline:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        contexts=LAYOUT.contexts("{source}", "search"),
    output:
        package=directory(LAYOUT.candidate("{source}", "gptq-{limit}gib")),
        record=LAYOUT.gptq_record("{source}", "{limit}"),
    log:
        "logs/gptq_baseline/{source}/{limit}.log",
    benchmark:
        "benchmarks/gptq_baseline/{source}/{limit}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=120,
        gpu=gpus("gptq_baseline"),
    params:
        code=code("gptq_baseline"),
        corpus=CFG.likelihood.corpus.model_dump(mode="json"),
        # the device decides where GPTQModel quantizes, not what it writes: changing it reruns nothing
        gptq=CFG.compression.gptq.model_dump(mode="json", exclude={"device", "variants"}),
    script:
        "../scripts/gptq_baseline.py"


# A GPTQ package of fixed widths (compression.gptq.variants: the paper's pilot grid), verified under every task.
rule gptq_variant:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        contexts=LAYOUT.contexts("{source}", "search"),
    output:
        package=directory(LAYOUT.candidate("{source}", "gptq-{variant}")),
        record=LAYOUT.gptq_variant_record("{source}", "{variant}"),
    log:
        "logs/gptq_variant/{source}/{variant}.log",
    benchmark:
        "benchmarks/gptq_variant/{source}/{variant}.tsv"
    wildcard_constraints:
        variant="|".join(re.escape(v.name) for v in CFG.compression.gptq.variants) or "(?!)",
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=120,
        gpu=gpus("gptq_variant"),
    params:
        code=code("gptq_variant"),
        corpus=CFG.likelihood.corpus.model_dump(mode="json"),
        # as gptq_baseline: the device decides where GPTQModel quantizes, not what it writes
        gptq=CFG.compression.gptq.model_dump(mode="json", exclude={"device", "variants", "enabled", "bit_widths"}),
        variant=lambda wc: next(v for v in CFG.compression.gptq.variants if v.name == wc.variant).model_dump(
            mode="json"
        ),
    script:
        "../scripts/gptq_variant.py"


rule measure_candidate:
    input:
        package=lambda wc: PLAN.candidate_inputs(wc.source, wc.candidate),
        checkpoint=LAYOUT.checkpoint("{source}"),
        record=LAYOUT.source_record("{source}"),
        continuations=LAYOUT.continuations("{source}", "verification"),
        reference=LAYOUT.reference_scores("{source}", "verification"),
        reference_top=LAYOUT.reference_top("{source}", "verification"),
        answers_reference=LAYOUT.answers_reference("{source}"),
    output:
        LAYOUT.measured("{source}", "{candidate}"),
    log:
        "logs/measure_candidate/{source}/{candidate}.log",
    benchmark:
        "benchmarks/measure_candidate/{source}/{candidate}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=VERIFICATION_MINUTES,
        gpu=gpus("measure_candidate"),
    params:
        code=candidate_code,
        package=lambda wc: PLAN.candidate_dir(wc.source, wc.candidate),
        settings=CFG.verification.model_dump(mode="json"),
        sandbox=CFG.sandbox.model_dump(mode="json"),
        answers=CFG.answers.model_dump(mode="json"),
        temperature=CFG.likelihood.temperature,
        secret=SECRET,
        # the sandbox's hard memory limit starts from the largest storage limit the candidate is judged under
        memory_limit_gib=lambda wc: PLAN.largest_limit(wc.source),
    script:
        "../scripts/measure_candidate.py"


rule verify:
    input:
        lambda wc: LAYOUT.measured(PLAN.tasks[wc.task].source, wc.candidate),
    output:
        LAYOUT.verdict("{task}", "{candidate}"),
    log:
        "logs/verify/{task}/{candidate}.log",
    benchmark:
        "benchmarks/verify/{task}/{candidate}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    params:
        code=code("verify"),
        task=lambda wc: PLAN.tasks[wc.task].model_dump(),
        secret=SECRET,
    script:
        "../scripts/verify.py"


rule compression_table:
    input:
        records=PLAN.compression_records,
        sources=[LAYOUT.source_record(s) for s in PLAN.sources],
    output:
        csv=report(
            LAYOUT.table("compression", "csv"),
            caption="../report/compression_table.rst",
            category="CompressionBench",
            subcategory="Final verification",
        ),
        md=LAYOUT.table("compression", "md"),
        provenance=LAYOUT.table("compression", "provenance.json"),
        plot=report(
            LAYOUT.plot("accuracy_vs_bits", "png"),
            caption="../report/accuracy_vs_bits.rst",
            category="CompressionBench",
            subcategory="Final verification",
        ),
        plot_data=LAYOUT.plot("accuracy_vs_bits", "csv"),
    log:
        "logs/tables/compression.log",
    benchmark:
        "benchmarks/compression_table.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("compression_table"),
        config={
            "tasks": [t.model_dump(mode="json") for t in CFG.tasks],
            "compression": CFG.compression.model_dump(mode="json"),
            "verification": CFG.verification.model_dump(mode="json"),
            "answers": CFG.answers.model_dump(mode="json"),
        },
        labels=PLAN.run_labels,  # a run's final submission is labelled with its agent
    script:
        "../scripts/compression_table.py"
