# Source model materialization: BF16 safetensors checkpoint, record, F16 GGUF twin.


rule source_model:
    output:
        checkpoint=directory("results/sources/{source}/hf"),
        record="results/sources/{source}/source.json",
    params:
        code=code("source_model"),
        origin=lambda wc: config["sources"][wc.source]["origin"],
        dtype=lambda wc: config["sources"][wc.source].get("dtype", "bfloat16"),
    log:
        "logs/source_model/{source}.log",
    benchmark:
        "benchmarks/source_model/{source}.tsv"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/source_model.py"


rule source_gguf:
    input:
        checkpoint="results/sources/{source}/hf",
        record="results/sources/{source}/source.json",
    output:
        "results/sources/{source}/f16.gguf",
    params:
        code=code("source_gguf"),
        convert_script=config["llama_cpp"]["convert_hf_to_gguf"],
    log:
        "logs/source_gguf/{source}.log",
    benchmark:
        "benchmarks/source_gguf/{source}.tsv"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/source_gguf.py"
