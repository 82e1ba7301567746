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


SERVING = config.get("serving")


def serving_targets():
    """The ServerBench outputs of `rule all`, when the config has a serving section."""
    if SERVING is None:
        return []
    return [
        "results/tables/serving.md",
        "results/tables/serving.csv",
        "results/plots/serving_value_share.png",
        "results/serving/coverage.csv",
    ]


def serving_trace():
    trace = SERVING["workload"]["trace"]
    if trace["format"] == "synthetic":
        return "results/serving/trace/synthetic.jsonl"
    return trace["path"]
