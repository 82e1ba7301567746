"""Checks of a schema-valid config that the schema cannot express.

Run once when the workflow starts, so a bad config stops before any job.
"""

from __future__ import annotations

from typing import Any

from infbench.compression.answers.questions import check_config as check_answers
from infbench.errors import ConfigError
from infbench.sources import SourceOrigin, resolve_gguf


def check(config: dict[str, Any]) -> None:
    sources = config["sources"]
    for i, task in enumerate(config["tasks"]):
        if task["source"] not in sources:
            raise ConfigError(f"tasks[{i}].source",
                              f"unknown source '{task['source']}' (sources: {', '.join(sorted(sources))})")
    for name, spec in sources.items():
        origin = SourceOrigin.model_validate(spec["origin"])
        if origin.type != "hub":
            resolve_gguf(name, origin)
    check_answers(config)


def check_serving(config: dict[str, Any]) -> None:
    """The serving section: known source and servers, disjoint seeds, renderable launch specs."""
    from infbench.serving import servers, workload

    serving = config.get("serving")
    if serving is None:
        return
    if serving["source"] not in config["sources"]:
        raise ConfigError("serving.source", f"unknown source '{serving['source']}'")
    known = serving["servers"]
    ref = serving["calibration"]["reference"]
    if ref not in known:
        raise ConfigError("serving.calibration.reference", f"unknown server '{ref}' (servers: {', '.join(known)})")
    for i, system in enumerate(serving["systems"]):
        if system["server"] not in known:
            raise ConfigError(f"serving.systems[{i}].server", f"unknown server '{system['server']}'")
    for name, spec in known.items():
        servers.dry_run(name, servers.ServerSpec.model_validate(spec), servers.LaunchVars())
    cov = serving["coverage"]
    workload.check_disjoint({**serving["seeds"],
                             "coverage": list(range(cov["first_seed"], cov["first_seed"] + cov["seeds"]))})
    low, high = serving["workload"]["token_id_range"]
    if not low < high:
        raise ConfigError("serving.workload.token_id_range", f"empty range [{low}, {high})")
    first, last = serving["replay"]["start_ratio"]
    if first > last:
        raise ConfigError("serving.replay.start_ratio", f"[{first}, {last}] is not a range (first > last)")
