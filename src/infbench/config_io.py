"""Loading a config file outside Snakemake, validated against the one schema."""

from __future__ import annotations

from pathlib import Path

import yaml

from infbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def load_config(path: str | Path, schema: str | Path = SCHEMA) -> dict:
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    config = yaml.safe_load(Path(path).read_text())
    try:
        validate(config, str(schema), set_default=True)
    except WorkflowError as exc:
        raise ConfigError(str(path), str(exc).splitlines()[1] if "\n" in str(exc) else str(exc)) from exc
    return config
