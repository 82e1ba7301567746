import sys

sys.stderr = open(snakemake.log.run, "w")

from infbench.config.model import ServingCore
from infbench.serving import calibrate, replay_job, servers, workload

serving = ServingCore.model_validate(snakemake.params.serving)
server = snakemake.wildcards.system
targets = calibrate.read_targets(snakemake.input.targets, serving, snakemake.input.sessions)
c = snakemake.params.concurrency
c = targets.concurrency if c == "reference" else int(c)
sessions = workload.load(snakemake.input.sessions)
with servers.launched(
    server,
    serving.servers[server],
    servers.LaunchVars.for_serving(serving, snakemake.input.model_dir, snakemake.input.gguf),
    snakemake.log.server,
    servers.charged_cpus(serving.deployment),
) as base:
    summary = replay_job.replay_once(
        serving,
        sessions,
        server,
        base,
        c,
        int(snakemake.wildcards.seed),
        snakemake.output.records,
        snakemake.output.summary,
        replay_job.input_hashes(snakemake.input.sessions, snakemake.input.targets),
        targets.targets,
    )
print(summary.score.model_dump_json(), file=sys.stderr)
