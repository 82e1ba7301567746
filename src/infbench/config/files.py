"""A config file read outside Snakemake (the CLI, benchmarks, tests), checked as the workflow checks it at
start, and the papers' default of any key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infbench.config.model import Config, ServingSettings, parse
from infbench.errors import ConfigError


def load(path: str | Path) -> Config:
    """``path`` as a :class:`Config`; a file that is not YAML, or a bad value, raises a :class:`ConfigError`
    naming the file or the key."""
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(str(path), f"not a readable YAML file ({type(exc).__name__}: {exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(str(path), "a config file is a mapping of sections")
    return parse(raw)


def serving_default(dotted: str) -> Any:
    """The paper's default of ``serving.<dotted>`` (e.g. ``replay.idle_cap_s``), as JSON."""
    node: Any = ServingSettings(source="unused").model_dump(mode="json")
    for key in dotted.split("."):
        node = node[key]
    return node
