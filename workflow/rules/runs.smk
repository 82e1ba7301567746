# Agent runs: the scripted reference search, ingestion of every run directory (PLAN.runs), and the
# trajectory analyses (PROTOCOL A8, B6; docs/runs.md). A run's final submission is a compression candidate.
from infbench.runs.outputs import ANALYSES as RUN_ANALYSES, PLOTTED as RUN_PLOTTED

REFERENCE_TASK = PLAN.reference_task
# Every candidate of the reference search is quantized, then rewarded by a worker with verification.timeout_s.
REFERENCE_SEARCH_MINUTES = len(CFG.runs.reference_search.candidates) * VERIFICATION_MINUTES


if REFERENCE_TASK is not None:

    rule reference_search:
        input:
            gguf=LAYOUT.source_gguf(REFERENCE_TASK.source),
            checkpoint=LAYOUT.checkpoint(REFERENCE_TASK.source),
            record=LAYOUT.source_record(REFERENCE_TASK.source),
            continuations=LAYOUT.continuations(REFERENCE_TASK.source, "search"),
            reference=LAYOUT.reference_scores(REFERENCE_TASK.source, "search"),
        output:
            directory(LAYOUT.reference_search()),
        log:
            "logs/reference_search/reference_search.log",
        benchmark:
            "benchmarks/reference_search.tsv"
        conda:
            "../../envs/pipeline.yaml"
        threads: 2
        resources:
            mem_mb=8000,
            runtime=REFERENCE_SEARCH_MINUTES,
            gpu=resources.job_gpus(CFG, "reference_search", REFERENCE_TASK.source),
        params:
            code=code("reference_search"),
            task=REFERENCE_TASK.model_dump(),
            search=CFG.runs.reference_search.model_dump(mode="json"),
            settings=CFG.verification.model_dump(mode="json"),
            sandbox=CFG.sandbox.model_dump(mode="json"),
        script:
            "../scripts/reference_search.py"


rule ingest_run:
    input:
        lambda wc: PLAN.runs[wc.run].inputs,
    output:
        status=LAYOUT.ingested("{run}", "status.json"),
        record=LAYOUT.ingested("{run}", "record.json"),
        events=LAYOUT.ingested("{run}", "events.parquet"),
    log:
        "logs/ingest_run/{run}.log",
    benchmark:
        "benchmarks/ingest_run/{run}.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("ingest_run"),
        run_dir=lambda wc: PLAN.runs[wc.run].path,
        candidate=lambda wc: PLAN.runs[wc.run].candidate,
        models=sorted(CFG.runs.prices),
        tasks=sorted(PLAN.tasks),
    script:
        "../scripts/ingest_run.py"


rule runs_analysis:
    input:
        statuses=[LAYOUT.ingested(run, "status.json") for run in sorted(PLAN.runs)],
        records=[LAYOUT.ingested(run, "record.json") for run in sorted(PLAN.runs)],
        verified=[LAYOUT.verdict(e.task, e.candidate) for _, e in sorted(PLAN.runs.items()) if e.candidate],
    output:
        **{
            f"{name}_{kind}": (
                report(
                    LAYOUT.run_table(name, "csv"),
                    caption=f"../report/runs/{name}.rst",
                    category="Agent runs",
                    subcategory=sub,
                )
                if kind == "csv"
                else LAYOUT.run_table(name, "md" if kind == "md" else "provenance.json")
            )
            for name, sub in RUN_ANALYSES.items()
            for kind in ("csv", "md", "provenance")
        },
        **{
            f"{name}_png": report(
                LAYOUT.run_plot(name, "png"),
                caption=f"../report/runs/{name}.rst",
                category="Agent runs",
                subcategory=RUN_ANALYSES[name],
            )
            for name in RUN_PLOTTED
        },
        **{f"{name}_data": LAYOUT.run_plot(name, "csv") for name in RUN_PLOTTED},
    log:
        "logs/tables/runs.log",
    benchmark:
        "benchmarks/runs_analysis.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        code=code("runs_analysis"),
        runs=[n for n, e in sorted(PLAN.runs.items()) if e.candidate],
        settings={
            **CFG.runs.analysis.model_dump(mode="json"),
            "prices": {m: p.model_dump(mode="json") for m, p in CFG.runs.prices.items()},
        },
    script:
        "../scripts/runs_analysis.py"
