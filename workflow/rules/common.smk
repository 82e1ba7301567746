# Config validation and the helpers that turn config into rule inputs.
import re

from snakemake.utils import validate

from infbench import config_checks, resources


validate(config, schema="../schemas/config.schema.yaml")

SOURCES = sorted(config["sources"])
SETS = ["search", "verification"]


config_checks.check(config)

# Scale-out (README "Scale-out"): every rule declares threads and resources
# (mem_mb and runtime in minutes sized for the embedded default, gpu from the
# config); profiles/paper raises memory and runtime for the paper sources.
LIKELIHOOD_GPUS = resources.likelihood_gpus(config["likelihood"])
LIKELIHOOD_ENV = (
    "../../envs/vllm.yaml"
    if config["likelihood"]["backend"] == "vllm"
    else "../../envs/compression-cpu.yaml"
)


wildcard_constraints:
    source="|".join(map(re.escape, SOURCES)),
    set="|".join(SETS),


def source_dir(wildcards):
    return f"results/sources/{wildcards.source}/hf"
