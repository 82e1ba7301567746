# Accuracy reference of each source (PROTOCOL A5.2): A(p), computed once per source; the accuracy
# gate compares candidates with it. Its questions are drawn from the operator secret (only the fingerprint is
# a parameter).


rule answers_reference:
    input:
        checkpoint=LAYOUT.checkpoint("{source}"),
        record=LAYOUT.source_record("{source}"),
    output:
        reference=LAYOUT.answers_reference("{source}"),
        item_records=LAYOUT.answers_items("{source}"),
    log:
        "logs/answers_reference/{source}.log",
    benchmark:
        "benchmarks/answers_reference/{source}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
        gpu=gpus("answers_reference"),
    params:
        code=code("answers_reference"),
        answers=CFG.answers.model_dump(mode="json"),
        sandbox=CFG.sandbox.model_dump(mode="json"),
        secret=SECRET,
    script:
        "../scripts/answers_reference.py"
