# ServerBench: workload, coverage, calibration, development replays, Table 1 (PROTOCOL B). Only included
# when the config has a `serving` section.

SERVING_SOURCE = SERVING.source

# Package modules the configured servers run (`{python} -m infbench.serving.starter`): part of the code of
# the jobs that launch them.
SERVING_SERVER_MODULES = code_digest.modules_named(SERVING.model_dump(mode="json")["servers"])
SERVING_MODEL = {
    "model_dir": LAYOUT.checkpoint(SERVING_SOURCE),
    "gguf": LAYOUT.source_gguf(SERVING_SOURCE),
}
# Scheduler time limits of the serving jobs, from the replay window: one replay (plus server start-up), or
# one per calibration concurrency and seed.
SERVING_GPUS = SERVING.deployment.devices if SERVING.deployment.accelerator == "gpu" else 0
SERVING_REPLAY_MINUTES = int(15 + SERVING.replay_minutes)
SERVING_CALIBRATE_MINUTES = int(
    15 + SERVING.replay_minutes * (len(SERVING.calibration.concurrencies) + len(SERVING.seeds.calibration))
)


rule serving_synthetic:
    output:
        LAYOUT.synthetic_trace(),
    log:
        "logs/serving/synthetic.log",
    benchmark:
        "benchmarks/serving_synthetic.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=code("serving_synthetic"),
        synthetic=SERVING.workload.synthetic.model_dump(mode="json"),
    script:
        "../scripts/serving_synthetic.py"


rule serving_workload:
    input:
        trace=serving_trace(),
    output:
        sessions=LAYOUT.sessions(),
        summary=LAYOUT.workload_summary(),
    log:
        "logs/serving/workload.log",
    benchmark:
        "benchmarks/serving_workload.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("serving_workload"),
        workload=SERVING.workload.model_dump(mode="json"),
        context_limit=SERVING.deployment.context_limit,
    script:
        "../scripts/serving_workload.py"


rule serving_coverage:
    input:
        sessions=LAYOUT.sessions(),
    output:
        csv=LAYOUT.coverage("csv"),
        json=LAYOUT.coverage("json"),
    log:
        "logs/serving/coverage.log",
    benchmark:
        "benchmarks/serving_coverage.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("serving_coverage"),
        serving=serving_view(),
    script:
        "../scripts/serving_coverage.py"


rule serving_calibrate:
    input:
        **SERVING_MODEL,
        sessions=LAYOUT.sessions(),
    output:
        targets=LAYOUT.targets(),
        runs=directory(LAYOUT.calibration_runs()),
    log:
        run="logs/serving/calibrate.log",
        server="logs/serving/servers/calibrate.log",
    benchmark:
        "benchmarks/serving_calibrate.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=SERVING_CALIBRATE_MINUTES,
        gpu=SERVING_GPUS,
    params:
        code=code("serving_calibrate", also_modules=SERVING_SERVER_MODULES),
        serving=serving_view(),
    script:
        "../scripts/serving_calibrate.py"


rule serving_baseline:
    input:
        **SERVING_MODEL,
        sessions=LAYOUT.sessions(),
        targets=LAYOUT.targets(),
    output:
        record=LAYOUT.baseline("{engine}"),
        runs=directory(LAYOUT.baseline_runs("{engine}")),
    log:
        run="logs/serving/baseline_{engine}.log",
        server="logs/serving/servers/baseline_{engine}.log",
    benchmark:
        "benchmarks/serving_baseline/{engine}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=SERVING_CALIBRATE_MINUTES,
        gpu=SERVING_GPUS,
    params:
        code=code("serving_baseline", also_modules=SERVING_SERVER_MODULES),
        serving=lambda wc: serving_view(wc.engine),
    script:
        "../scripts/serving_baseline.py"


rule serving_replay:
    input:
        **SERVING_MODEL,
        sessions=LAYOUT.sessions(),
        targets=LAYOUT.targets(),
    output:
        records=LAYOUT.replay("{system}", "{seed}", "parquet"),
        summary=LAYOUT.replay("{system}", "{seed}", "json"),
    log:
        run="logs/serving/replay/{system}_seed{seed}.log",
        server="logs/serving/servers/{system}_seed{seed}.log",
    benchmark:
        "benchmarks/serving_replay/{system}/{seed}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=SERVING_REPLAY_MINUTES,
        gpu=SERVING_GPUS,
    params:
        code=code("serving_replay", also_modules=SERVING_SERVER_MODULES),
        serving=lambda wc: serving_view(wc.system),
        concurrency=lambda wc: PLAN.serving_systems[wc.system],
    script:
        "../scripts/serving_replay.py"


rule serving_table:
    input:
        sessions=LAYOUT.sessions(),
        targets=LAYOUT.targets(),
        # the development seeds' replays; the final seeds are held out for verification (serving_verify.smk)
        summaries=PLAN.serving_replays,
        baselines=PLAN.serving_baselines,
    output:
        csv=report(
            LAYOUT.table("serving", "csv"),
            caption="../report/serving_table.rst",
            category="ServerBench",
            subcategory="Table 1",
        ),
        md=LAYOUT.table("serving", "md"),
        provenance=LAYOUT.table("serving", "provenance.json"),
        plot=report(
            LAYOUT.plot("serving_value_share", "png"),
            caption="../report/serving_plot.rst",
            category="ServerBench",
            subcategory="Table 1",
        ),
        plot_data=LAYOUT.plot("serving_value_share", "csv"),
    log:
        "logs/serving/table.log",
    benchmark:
        "benchmarks/serving_table.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=code("serving_table"),
        serving=serving_view(),
        uncertainty=SERVING.uncertainty.model_dump(mode="json"),
    script:
        "../scripts/serving_table.py"
