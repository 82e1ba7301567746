import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.compression.tasks import Task
from infbench.config.model import (
    ReferenceSearchSettings,
    SandboxSettings,
    VerificationSettings,
)
from infbench.layout import LAYOUT
from infbench.runs import reference_search

reference_search.run(
    snakemake.output[0],
    f16_gguf=snakemake.input.gguf,
    checkpoint=snakemake.input.checkpoint,
    task=Task.model_validate(snakemake.params.task),
    search=ReferenceSearchSettings.model_validate(snakemake.params.search),
    results=LAYOUT,
    settings=VerificationSettings.model_validate(snakemake.params.settings),
    sandbox=SandboxSettings.model_validate(snakemake.params.sandbox),
    threads=snakemake.threads,
    worker_log=snakemake.log[0],
)
