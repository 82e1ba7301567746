# ServerBench verification (PROTOCOL B5): every server submission (a directory with a
# submission.yaml under one of serving.submissions) is rebuilt in a fresh copy, replayed on
# the final (held-out) seeds at its declared c, checked, and torn down; only verified
# submissions are scored in results/tables/serving_verified.*. Included by serving.smk.

from infbench import operator_secret
from infbench.serving.verify import submission as server_submission

SERVING_SUBMISSIONS = server_submission.discover(SERVING["submissions"])
# Probes, held-out questions and fidelity suspects are drawn from the operator's secret, loaded inside
# the jobs; only its fingerprint is a parameter, so a new secret reruns them.
SERVING_SECRET = operator_secret.load(config["operator_secret"]).fingerprint
wildcard_constraints:
    submission="|".join(map(re.escape, SERVING_SUBMISSIONS)) or "(?!)",


rule serving_verification_reference:
    input:
        model_dir=SERVING_MODEL["model_dir"],
    output:
        "results/serving/reference/verification.json",
    params:
        code=code("serving_verification_reference"),
        source=SERVING_SOURCE,
        verification=SERVING["verification"],
        token_id_range=SERVING["workload"]["token_id_range"],
        answers=config["answers"],
        secret=SERVING_SECRET,
    log:
        "logs/serving/verification_reference.log",
    benchmark:
        "benchmarks/serving_verification_reference.tsv"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_verification_reference.py"


rule serving_verify:
    input:
        submission=lambda wc: server_submission.files(SERVING_SUBMISSIONS[wc.submission]),
        sessions="results/serving/workload/sessions.jsonl",
        reference="results/serving/reference/verification.json",
        **SERVING_MODEL,
    output:
        record="results/serving/verification/{submission}.json",
        runs=directory("results/serving/verification/{submission}"),
    params:
        code=lambda wc: code("serving_verify", also_files=server_submission.files(SERVING_SUBMISSIONS[wc.submission]), also_modules=SERVING_SERVER_MODULES),
        serving=SERVING_CORE,
        verification=SERVING["verification"],
        answers=config["answers"],
        sandbox=config["sandbox"],
        directory=lambda wc: SERVING_SUBMISSIONS[wc.submission],
        secret=SERVING_SECRET,
    log:
        run="logs/serving/verify/{submission}.log",
        server="logs/serving/servers/verify_{submission}.log",
    benchmark:
        "benchmarks/serving_verify/{submission}.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=SERVING_REPLAY_MINUTES * len(SERVING["seeds"]["final"]) + 30,
        gpu=SERVING_GPUS,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_verify.py"


rule serving_verified_table:
    input:
        sessions="results/serving/workload/sessions.jsonl",
        targets="results/serving/calibration/targets.json",
        records=expand(
            "results/serving/verification/{submission}.json",
            submission=SERVING_SUBMISSIONS,
        ),
    output:
        csv=report(
            "results/tables/serving_verified.csv",
            caption="../report/serving_verified_table.rst",
            category="ServerBench",
            subcategory="Table 1 (verified)",
        ),
        md="results/tables/serving_verified.md",
        provenance="results/tables/serving_verified.provenance.json",
    params:
        code=code("serving_verified_table"),
        serving=SERVING_CORE,
        uncertainty=SERVING["uncertainty"],
    log:
        "logs/serving/verified_table.log",
    benchmark:
        "benchmarks/serving_verified_table.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_verified_table.py"
