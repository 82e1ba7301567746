# ServerBench (PROTOCOL B): workload, calibration, replays, Table 1, coverage.
# Only included when the config has a `serving` section.

SERVING_SOURCE = SERVING["source"]
SERVING_SYSTEMS = {s["server"]: s["concurrency"] for s in SERVING["systems"]}
# The serving section as the workload, calibration and replay jobs use it: verification
# settings, the submission directories (serving_verify.smk) and the tables' uncertainty
# settings do not rerun them.
SERVING_CORE = {
    k: v
    for k, v in SERVING.items()
    if k not in ("submissions", "verification", "uncertainty")
}
# Package modules the configured servers run (`{python} -m infbench.serving.starter`): part of the code of
# the jobs that launch them.
SERVING_SERVER_MODULES = code_digest.modules_named(SERVING["servers"])
SERVING_MODEL = {
    "model_dir": f"results/sources/{SERVING_SOURCE}/hf",
    "gguf": f"results/sources/{SERVING_SOURCE}/f16.gguf",
}


wildcard_constraints:
    system="|".join(map(re.escape, SERVING_SYSTEMS)),
    seed="[0-9]+",


rule serving_synthetic:
    output:
        "results/serving/trace/synthetic.jsonl",
    params:
        code=code("serving_synthetic"),
        synthetic=SERVING["workload"]["synthetic"],
    log:
        "logs/serving/synthetic.log",
    benchmark:
        "benchmarks/serving_synthetic.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_synthetic.py"


rule serving_workload:
    input:
        trace=serving_trace(),
    output:
        sessions="results/serving/workload/sessions.jsonl",
        summary="results/serving/workload/workload.json",
    params:
        code=code("serving_workload"),
        workload=SERVING["workload"],
        context_limit=SERVING["deployment"]["context_limit"],
    log:
        "logs/serving/workload.log",
    benchmark:
        "benchmarks/serving_workload.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_workload.py"


rule serving_coverage:
    input:
        sessions="results/serving/workload/sessions.jsonl",
    output:
        csv="results/serving/coverage.csv",
        json="results/serving/coverage.json",
    params:
        code=code("serving_coverage"),
        serving=SERVING_CORE,
    log:
        "logs/serving/coverage.log",
    benchmark:
        "benchmarks/serving_coverage.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_coverage.py"


rule serving_calibrate:
    input:
        sessions="results/serving/workload/sessions.jsonl",
        **SERVING_MODEL,
    output:
        targets="results/serving/calibration/targets.json",
        runs=directory("results/serving/calibration/runs"),
    params:
        code=code("serving_calibrate", also_modules=SERVING_SERVER_MODULES),
        serving=SERVING_CORE,
    log:
        run="logs/serving/calibrate.log",
        server="logs/serving/servers/calibrate.log",
    benchmark:
        "benchmarks/serving_calibrate.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=SERVING_CALIBRATE_MINUTES,
        gpu=SERVING_GPUS,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_calibrate.py"


rule serving_replay:
    input:
        sessions="results/serving/workload/sessions.jsonl",
        targets="results/serving/calibration/targets.json",
        **SERVING_MODEL,
    output:
        records="results/serving/replays/{system}/seed{seed}.parquet",
        summary="results/serving/replays/{system}/seed{seed}.json",
    params:
        code=code("serving_replay", also_modules=SERVING_SERVER_MODULES),
        serving=SERVING_CORE,
        concurrency=lambda wc: SERVING_SYSTEMS[wc.system],
    log:
        run="logs/serving/replay/{system}_seed{seed}.log",
        server="logs/serving/servers/{system}_seed{seed}.log",
    benchmark:
        "benchmarks/serving_replay/{system}/{seed}.tsv"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=SERVING_REPLAY_MINUTES,
        gpu=SERVING_GPUS,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_replay.py"


# The development table replays the development seeds; the final seeds are held out for
# verification (serving_verify.smk).
SERVING_REPLAYS = expand(
    "results/serving/replays/{system}/seed{seed}.json",
    system=SERVING_SYSTEMS,
    seed=SERVING["seeds"]["development"],
)


rule serving_table:
    input:
        sessions="results/serving/workload/sessions.jsonl",
        targets="results/serving/calibration/targets.json",
        summaries=SERVING_REPLAYS,
    output:
        csv=report(
            "results/tables/serving.csv",
            caption="../report/serving_table.rst",
            category="ServerBench",
            subcategory="Table 1",
        ),
        md="results/tables/serving.md",
        provenance="results/tables/serving.provenance.json",
        plot=report(
            "results/plots/serving_value_share.png",
            caption="../report/serving_plot.rst",
            category="ServerBench",
            subcategory="Table 1",
        ),
        plot_data="results/plots/serving_value_share.csv",
    params:
        code=code("serving_table"),
        serving=SERVING_CORE,
        uncertainty=SERVING["uncertainty"],
    log:
        "logs/serving/table.log",
    benchmark:
        "benchmarks/serving_table.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/serving_table.py"


# Server submissions and their verification (PROTOCOL B5).
include: "serving_verify.smk"
