import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.config.model import WorkloadSettings
from infbench.serving import workload

w = WorkloadSettings.model_validate(snakemake.params.workload)
summary = workload.prepare(
    snakemake.input.trace,
    "weka" if w.trace.format == "synthetic" else w.trace.format,
    length_scale=w.length_scale,
    context_limit=snakemake.params.context_limit,
    block_size=w.trace.mooncake_block_size,
    out_sessions=snakemake.output.sessions,
    out_summary=snakemake.output.summary,
)
print(summary.model_dump_json(exclude={"provenance"}), file=sys.stderr)
