# Config validation and the helpers that turn config into rule inputs.
import re

from snakemake.utils import validate

from infbench import config_checks


validate(config, schema="../schemas/config.schema.yaml")

SOURCES = sorted(config["sources"])
SETS = ["search", "verification"]


config_checks.check(config)
config_checks.check_serving(config)


wildcard_constraints:
    source="|".join(map(re.escape, SOURCES)),
    set="|".join(SETS),


def source_dir(wildcards):
    return f"results/sources/{wildcards.source}/hf"
