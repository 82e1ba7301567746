# Agent runs (PROTOCOL A8, B6; docs/runs.md): the scripted reference search,
# ingestion of every run directory, and the trajectory analyses. Included before
# compression.smk: a run's final submission is a compression candidate.
from infbench.runs import discover as runs_discover
from infbench.runs.outputs import ANALYSES as RUN_ANALYSES, PLOTTED as RUN_PLOTTED

RUNS = runs_discover.discover(config, TASKS)
RUN_CANDIDATES = {e.candidate: e for e in RUNS.values() if e.candidate}
REFERENCE_TASK = runs_discover.reference_task(config, TASKS)
# Every candidate of the reference search is quantized, then rewarded by a worker with verification.timeout_s.
REFERENCE_SEARCH_MINUTES = (
    len(config["runs"]["reference_search"]["candidates"]) * VERIFICATION_MINUTES
)


if REFERENCE_TASK is not None:

    rule reference_search:
        input:
            gguf=f"results/sources/{REFERENCE_TASK.source}/f16.gguf",
            checkpoint=f"results/sources/{REFERENCE_TASK.source}/hf",
            record=f"results/sources/{REFERENCE_TASK.source}/source.json",
            continuations=f"results/likelihood/{REFERENCE_TASK.source}/search/continuations.parquet",
            reference=f"results/likelihood/{REFERENCE_TASK.source}/search/reference_scores.parquet",
        output:
            directory(runs_discover.REFERENCE_DIR),
        params:
            code=code("reference_search"),
            task=REFERENCE_TASK.model_dump(),
            search=config["runs"]["reference_search"],
            settings=config["verification"],
            sandbox=config["sandbox"],
        log:
            "logs/reference_search/reference_search.log",
        benchmark:
            "benchmarks/reference_search.tsv"
        threads: 2
        resources:
            mem_mb=8000,
            runtime=REFERENCE_SEARCH_MINUTES,
            gpu=resources.job_gpus(CFG, "reference_search", REFERENCE_TASK.source),
        conda:
            "../../envs/pipeline.yaml"
        script:
            "../scripts/reference_search.py"


rule ingest_run:
    input:
        lambda wc: RUNS[wc.run].inputs,
    output:
        status="results/runs/ingested/{run}/status.json",
        record="results/runs/ingested/{run}/record.json",
        events="results/runs/ingested/{run}/events.parquet",
    params:
        code=code("ingest_run"),
        run_dir=lambda wc: RUNS[wc.run].path,
        candidate=lambda wc: RUNS[wc.run].candidate,
        models=sorted(config["runs"]["prices"]),
        tasks=sorted(TASKS),
    log:
        "logs/ingest_run/{run}.log",
    benchmark:
        "benchmarks/ingest_run/{run}.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/ingest_run.py"


rule runs_analysis:
    input:
        statuses=expand("results/runs/ingested/{run}/status.json", run=sorted(RUNS)),
        records=expand("results/runs/ingested/{run}/record.json", run=sorted(RUNS)),
        verified=[
            f"results/compression/verification/{e.task}/{e.candidate}.json"
            for _, e in sorted(RUNS.items())
            if e.candidate
        ],
    params:
        code=code("runs_analysis"),
        runs=[n for n, e in sorted(RUNS.items()) if e.candidate],
        settings={
            **config["runs"]["analysis"],
            "prices": config["runs"]["prices"],
        },
    output:
        **{
            f"{name}_{kind}": (
                report(
                    f"results/tables/runs/{name}.csv",
                    caption=f"../report/runs/{name}.rst",
                    category="Agent runs",
                    subcategory=sub,
                )
                if kind == "csv"
                else f"results/tables/runs/{name}.{'md' if kind == 'md' else 'provenance.json'}"
            )
            for name, sub in RUN_ANALYSES.items()
            for kind in ("csv", "md", "provenance")
        },
        **{
            f"{name}_png": report(
                f"results/plots/runs/{name}.png",
                caption=f"../report/runs/{name}.rst",
                category="Agent runs",
                subcategory=RUN_ANALYSES[name],
            )
            for name in RUN_PLOTTED
        },
        **{f"{name}_data": f"results/plots/runs/{name}.csv" for name in RUN_PLOTTED},
    log:
        "logs/tables/runs.log",
    benchmark:
        "benchmarks/runs_analysis.tsv"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/runs_analysis.py"
