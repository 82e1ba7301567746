# Config validation and the helpers that turn config into rule inputs.
import re

from snakemake.utils import validate


validate(config, schema="../schemas/config.schema.yaml")

SOURCES = sorted(config["sources"])
SETS = ["search", "verification"]


def _check_tasks():
    for i, task in enumerate(config["tasks"]):
        if task["source"] not in config["sources"]:
            raise ValueError(
                f"config key 'tasks[{i}].source': unknown source '{task['source']}' "
                f"(sources: {', '.join(SOURCES)})"
            )


_check_tasks()


wildcard_constraints:
    source="|".join(map(re.escape, SOURCES)),
    set="|".join(SETS),


def source_dir(wildcards):
    return f"results/sources/{wildcards.source}/hf"
