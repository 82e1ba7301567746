import sys

sys.stderr = open(snakemake.log.run, "w")

from infbench.serving import calibrate, runs, servers, workload

serving = snakemake.params.serving
server = snakemake.wildcards.system
targets = calibrate.read_targets(snakemake.input.targets, serving, snakemake.input.sessions)
c = snakemake.params.concurrency
c = targets.concurrency if c == "reference" else int(c)
sessions = workload.load(snakemake.input.sessions)
with servers.launched(server, runs.spec(serving, server),
                      runs.launch_vars(serving, snakemake.input.model_dir, snakemake.input.gguf),
                      snakemake.log.server) as base:
    summary = runs.replay_once(
        serving, sessions, server, base, c, int(snakemake.wildcards.seed), snakemake.output.records,
        snakemake.output.summary, runs.input_hashes(snakemake.input.sessions, snakemake.input.targets),
        targets.targets,
    )
print(summary.score.model_dump_json(), file=sys.stderr)
