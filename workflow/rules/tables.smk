# Tables and plots for readers, with their provenance.


rule tables:
    input:
        records=expand("results/sources/{source}/source.json", source=SOURCES),
        sampling=expand(
            "results/likelihood/{source}/{set}/sampling.json", source=SOURCES, set=SETS
        ),
        reference=expand(
            "results/likelihood/{source}/{set}/reference.json", source=SOURCES, set=SETS
        ),
    output:
        csv=report(
            "results/tables/reference.csv",
            caption="../report/reference_table.rst",
            category="CompressionBench",
            subcategory="BF16 reference",
        ),
        md="results/tables/reference.md",
        provenance="results/tables/reference.provenance.json",
    params:
        code=code("reference_table"),
        config={"sources": config["sources"], "likelihood": config["likelihood"]},
    log:
        "logs/tables/reference.log",
    benchmark:
        "benchmarks/tables.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/reference_table.py"


rule plot_reference:
    input:
        sampling=expand(
            "results/likelihood/{source}/{set}/continuations.parquet",
            source=SOURCES,
            set=SETS,
        ),
        reference=expand(
            "results/likelihood/{source}/{set}/reference_scores.parquet",
            source=SOURCES,
            set=SETS,
        ),
    output:
        plot=report(
            "results/plots/reference_ppl.png",
            caption="../report/reference_ppl.rst",
            category="CompressionBench",
            subcategory="BF16 reference",
        ),
        plot_data="results/plots/reference_ppl.csv",
    params:
        code=code("plot_reference"),
        labels=[(source, set_) for source in SOURCES for set_ in SETS],
    log:
        "logs/tables/reference_plot.log",
    benchmark:
        "benchmarks/plot_reference.tsv"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        "../../envs/pipeline.yaml"
    script:
        "../scripts/plot_reference.py"
