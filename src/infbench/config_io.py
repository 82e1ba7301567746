"""Loading a config file outside Snakemake, validated against the one schema."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from infbench.errors import ConfigError

Model = TypeVar("Model", bound=BaseModel)

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


@functools.cache
def _schema(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def schema_default(dotted: str, schema: str | Path = SCHEMA) -> Any:
    """The schema's default of a config key, e.g. ``serving.replay.idle_cap_s`` (the paper's value)."""
    node = _schema(Path(schema))
    for key in dotted.split("."):
        node = node["properties"][key]
    return node["default"]


def load_config(path: str | Path, schema: str | Path = SCHEMA) -> dict:
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    config = yaml.safe_load(Path(path).read_text())
    try:
        validate(config, str(schema), set_default=True)
    except WorkflowError as exc:
        raise ConfigError(str(path), str(exc).splitlines()[1] if "\n" in str(exc) else str(exc)) from exc
    return config


def section(parent: dict[str, Any], key: str, model: type[Model], *, path: str | None = None) -> Model:
    """``parent[key]`` as ``model``; a missing section or bad field raises a ConfigError naming its dotted
    key (``path``: the section's own dotted key when ``parent`` is not the top of the config)."""
    dotted = path or key
    try:
        value = parent[key]
    except KeyError:
        raise ConfigError(dotted, "missing (validate the config against the schema first)") from None
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(".".join([dotted, *map(str, err["loc"])]), err["msg"]) from None
