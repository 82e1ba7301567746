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
