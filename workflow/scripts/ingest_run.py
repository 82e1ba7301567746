import sys

sys.stderr = open(snakemake.log[0], "w")

from infbench.runs import ingest

status = ingest.ingest(
    snakemake.params.run_dir,
    snakemake.wildcards.run,
    known_models=set(snakemake.params.models),
    tasks=set(snakemake.params.tasks),
    candidate=snakemake.params.candidate,
    status_path=snakemake.output.status,
    record_path=snakemake.output.record,
    events_path=snakemake.output.events,
)
print(status.model_dump_json(), file=sys.stderr)
