# The reference table and plot: the BF16 reference PPL per source and set, with their provenance.


rule reference_table:
    input:
        records=[LAYOUT.source_record(s) for s in PLAN.sources],
        sampling=[LAYOUT.sampling_summary(s, k) for s in PLAN.sources for k in SETS],
        reference=[LAYOUT.reference_summary(s, k) for s in PLAN.sources for k in SETS],
    output:
        csv=report(
            LAYOUT.table("reference", "csv"),
            caption="../report/reference_table.rst",
            category="CompressionBench",
            subcategory="BF16 reference",
        ),
        md=LAYOUT.table("reference", "md"),
        provenance=LAYOUT.table("reference", "provenance.json"),
    log:
        "logs/tables/reference.log",
    benchmark:
        "benchmarks/reference_table.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=code("reference_table"),
        config={
            "sources": {n: s.model_dump(mode="json") for n, s in CFG.sources.items()},
            "likelihood": CFG.likelihood.model_dump(mode="json"),
        },
    script:
        "../scripts/reference_table.py"


rule plot_reference:
    input:
        sampling=[LAYOUT.continuations(s, k) for s in PLAN.sources for k in SETS],
        reference=[LAYOUT.reference_scores(s, k) for s in PLAN.sources for k in SETS],
    output:
        plot=report(
            LAYOUT.plot("reference_ppl", "png"),
            caption="../report/reference_ppl.rst",
            category="CompressionBench",
            subcategory="BF16 reference",
        ),
        plot_data=LAYOUT.plot("reference_ppl", "csv"),
    log:
        "logs/tables/reference_plot.log",
    benchmark:
        "benchmarks/plot_reference.tsv"
    conda:
        "../../envs/pipeline.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    params:
        code=code("plot_reference"),
        labels=[(source, set_) for source in PLAN.sources for set_ in SETS],
    script:
        "../scripts/plot_reference.py"
