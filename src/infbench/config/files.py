"""A config file read outside Snakemake (the CLI, benchmarks, tests) or the config Snakemake read, typed with
errors that name the file(s), and the papers' default of any key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infbench.config.model import Config, ServingSettings, parse
from infbench.errors import ConfigError, InputFileError


def load(path: str | Path) -> Config:
    """``path`` as a :class:`Config`; a file that is not YAML raises an :class:`InputFileError` naming the
    file and line, a bad value a :class:`ConfigError` naming the file and the key."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputFileError(path, f"not a readable file ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputFileError(path, yaml_problem(exc)) from None
    return typed(raw, [str(path)])


def typed(raw: Any, paths: list[str]) -> Config:
    """``raw`` (the mapping read from the config files ``paths``, merged) as a :class:`Config`; a bad value
    raises a :class:`ConfigError` naming the file(s) and the key."""
    where = ", ".join(paths)
    if not isinstance(raw, dict):
        raise ConfigError("(top level)", "a config file is a mapping of sections", where)
    try:
        return parse(raw)
    except ConfigError as exc:
        raise exc.read_from(where) from None


def serving_default(dotted: str) -> Any:
    """The paper's default of ``serving.<dotted>`` (e.g. ``replay.idle_cap_s``), as JSON."""
    node: Any = ServingSettings(source="unused").model_dump(mode="json")
    for key in dotted.split("."):
        node = node[key]
    return node


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error in one line, with the line and column it was found at."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"not valid YAML: {at}{problem}"
