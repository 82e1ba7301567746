import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.tasks import Task
from infbench.runs import reference_search

search = snakemake.params.search
reference_search.run(
    snakemake.output[0],
    f16_gguf=snakemake.input.gguf,
    checkpoint=snakemake.input.checkpoint,
    task=Task.model_validate(snakemake.params.task),
    candidates=[dict(c) for c in search["candidates"]],
    budget_hours=search["budget_hours"],
    results="results",
    settings=dict(snakemake.params.settings),
    sandbox=dict(snakemake.params.sandbox),
    threads=snakemake.threads,
    worker_log=snakemake.log[0],
)
