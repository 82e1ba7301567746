# ServerBench verification (PROTOCOL B5): every server submission (a directory with a submission.yaml under
# one of serving.submissions, PLAN.serving_submissions) is rebuilt in a fresh copy, replayed on the final
# (held-out) seeds at its declared c, checked, and torn down; only verified submissions are scored in the
# verified table. Probes, held-out questions and fidelity suspects are drawn from the operator's secret,
# loaded inside the jobs; only its fingerprint is a parameter, so a new secret reruns them.


rule serving_verification_reference:
    input:
        model_dir=SERVING_MODEL["model_dir"],
    output:
        LAYOUT.serving_reference(),
    log:
        "logs/serving/verification_reference.log",
    benchmark:
        "benchmarks/serving_verification_reference.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        code=code("serving_verification_reference"),
        source=SERVING_SOURCE,
        verification=SERVING.verification.model_dump(mode="json"),
        token_id_range=list(SERVING.workload.token_id_range),
        answers=CFG.answers.model_dump(mode="json"),
        secret=SECRET,
    script:
        "../scripts/serving_verification_reference.py"


rule serving_verify:
    input:
        **SERVING_MODEL,
        submission=submission_files,
        sessions=LAYOUT.sessions(),
        reference=LAYOUT.serving_reference(),
    output:
        record=LAYOUT.server_verification("{submission}"),
        runs=directory(LAYOUT.server_verification_runs("{submission}")),
    log:
        run="logs/serving/verify/{submission}.log",
        server="logs/serving/servers/verify_{submission}.log",
    benchmark:
        "benchmarks/serving_verify/{submission}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=SERVING_REPLAY_MINUTES * len(SERVING.seeds.final) + 30,
        gpu=SERVING_GPUS,
    params:
        code=lambda wc: code(
            "serving_verify",
            also_files=submission_files(wc),
            also_modules=SERVING_SERVER_MODULES,
        ),
        serving=serving_view(),
        verification=SERVING.verification.model_dump(mode="json"),
        answers=CFG.answers.model_dump(mode="json"),
        sandbox=CFG.sandbox.model_dump(mode="json"),
        directory=lambda wc: PLAN.serving_submissions[wc.submission],
        secret=SECRET,
    script:
        "../scripts/serving_verify.py"


rule serving_verified_table:
    input:
        sessions=LAYOUT.sessions(),
        targets=LAYOUT.targets(),
        records=PLAN.serving_records,
    output:
        csv=report(
            LAYOUT.table("serving_verified", "csv"),
            caption="../report/serving_verified_table.rst",
            category="ServerBench",
            subcategory="Table 1 (verified)",
        ),
        md=LAYOUT.table("serving_verified", "md"),
        provenance=LAYOUT.table("serving_verified", "provenance.json"),
    log:
        "logs/serving/verified_table.log",
    benchmark:
        "benchmarks/serving_verified_table.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=code("serving_verified_table"),
        serving=serving_view(),
        uncertainty=SERVING.uncertainty.model_dump(mode="json"),
    script:
        "../scripts/serving_verified_table.py"
