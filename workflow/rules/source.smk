# Source models: the BF16 safetensors checkpoint, its record and the F16 GGUF twin.


rule source_model:
    output:
        checkpoint=directory(LAYOUT.checkpoint("{source}")),
        record=LAYOUT.source_record("{source}"),
    log:
        "logs/source_model/{source}.log",
    benchmark:
        "benchmarks/source_model/{source}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        code=code("source_model"),
        origin=lambda wc: CFG.sources[wc.source].origin.model_dump(mode="json"),
        dtype=lambda wc: CFG.sources[wc.source].dtype,
    script:
        "../scripts/source_model.py"


rule source_gguf:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        record=LAYOUT.source_record("{source}"),
    output:
        LAYOUT.source_gguf("{source}"),
    log:
        "logs/source_gguf/{source}.log",
    benchmark:
        "benchmarks/source_gguf/{source}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        code=code("source_gguf"),
        convert_script=CFG.llama_cpp.convert_hf_to_gguf,
    script:
        "../scripts/source_gguf.py"
