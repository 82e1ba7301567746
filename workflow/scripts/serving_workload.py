import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.serving import workload

w = snakemake.params.workload
trace = w["trace"]
summary = workload.prepare(
    snakemake.input.trace,
    "weka" if trace["format"] == "synthetic" else trace["format"],
    length_scale=w["length_scale"],
    context_limit=snakemake.params.context_limit,
    block_size=trace["mooncake_block_size"],
    out_sessions=snakemake.output.sessions,
    out_summary=snakemake.output.summary,
)
print(summary.model_dump_json(exclude={"provenance"}), file=sys.stderr)
