# The operator's copy of the secret (src/infbench/operator_secret.py), written once every final verification
# record of the round exists, both tracks'. The records themselves, and every job that
# reads them, keep its fingerprint only.


rule operator_secret:
    input:
        records=PLAN.round_records,
    output:
        LAYOUT.operator_secret(),
    log:
        "logs/operator_secret.log",
    benchmark:
        "benchmarks/operator_secret.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    params:
        code=code("operator_secret"),
        secret=SECRET,
    script:
        "../scripts/operator_secret.py"
