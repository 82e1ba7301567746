# The source's reference accuracy A(p) for the accuracy gate (PROTOCOL A5.2),
# computed once per source; candidates are compared with it. Its questions are
# drawn from the operator secret (only the fingerprint is a parameter).


rule answers_reference:
    input:
        checkpoint=source_dir,
        record="results/sources/{source}/source.json",
    output:
        reference="results/answers/{source}/reference.json",
        item_records="results/answers/{source}/reference_items.parquet",
    params:
        code=code("answers_reference"),
        answers=config["answers"],
        sandbox=config["sandbox"],
        secret=OPERATOR_SECRET.fingerprint,
    log:
        "logs/answers_reference/{source}.log",
    benchmark:
        "benchmarks/answers_reference/{source}.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus("answers_reference"),
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/answers_reference.py"
