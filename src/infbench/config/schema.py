"""Writes the config's JSON schema (YAML) from :class:`infbench.config.model.Config`, for Snakemake's
``validate(config, schema, set_default=True)``.

That validator fills a default only where a ``properties`` entry has one, and only in the nodes it
descends into, so the schema is shaped for it: every ``$ref`` inlined (no ``$defs``), nullable scalars as
``type: [T, "null"]``, constrained dict keys as ``propertyNames`` + ``additionalProperties`` (pydantic's
``patternProperties`` would let other keys through), and each default written as the smallest value that
the nested defaults complete to the model's (``gptq: {}`` rather than every GPTQ key). Filling a config
with it gives the dict ``Config.model_validate(config).model_dump(mode="json")`` is, key for key.

    python -m infbench.config.schema          # write workflow/schemas/config.schema.yaml
    python -m infbench.config.schema --check  # exit 1 if the committed file differs from the models
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue

from infbench import atomic
from infbench.config.model import Config

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
HEADER = (
    "# Generated from src/infbench/config/model.py by `python -m infbench.config.schema`; do not\n"
    "# edit. tests/config/test_config_model.py keeps it equal to the models.\n"
)
DRAFT = "https://json-schema.org/draft/2020-12/schema"
# bounds pydantic cannot push into a validator function (Number) it writes under their own names
_BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}
_ORDER = [
    "$schema",
    "title",
    "description",
    "type",
    "const",
    "enum",
    "pattern",
    "minLength",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "minProperties",
    "propertyNames",
    "additionalProperties",
    "required",
    "properties",
    "items",
    "anyOf",
    "allOf",
    "if",
    "then",
    "default",
]


def generate() -> dict[str, Any]:
    """The schema as a mapping."""
    raw = Config.model_json_schema(schema_generator=_Unsorted)
    defs = raw.pop("$defs", {})
    top = {"$schema": DRAFT, "title": raw["title"], "description": raw["description"]}
    return _ordered({**_defaults(_shape(raw, defs)), **top})


def render() -> str:
    """The schema file's text."""
    return HEADER + yaml.dump(generate(), Dumper=_Dumper, sort_keys=False, width=94, allow_unicode=True)


class _Unsorted(GenerateJsonSchema):
    """Keys in declaration order, defaults included: a default's key order is the order Snakemake
    fills the config in."""

    def sort(self, value: JsonSchemaValue, parent_key: str | None = None) -> JsonSchemaValue:
        return value

    def get_default_value(self, schema: Any) -> Any:
        """A default made by a factory (:func:`infbench.config.model.default_servers`) is written out too."""
        if "default_factory" in schema and not schema.get("default_factory_takes_data"):
            return schema["default_factory"]()
        return super().get_default_value(schema)


def _shape(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with refs inlined and pydantic's spellings turned into the ones Snakemake fills from."""
    if isinstance(node, list):
        return [_shape(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {name: _shape(sub, defs) for name, sub in value.items()}
        elif key in ("default", "const", "enum"):
            out[key] = value
        elif key == "description":
            out[key] = " ".join(value.split())  # docstrings wrap lines
        else:
            out[_BOUNDS.get(key, key)] = _shape(value, defs)
    options = out.get("anyOf")
    if options and len(options) == 2 and {"type": "null"} in options:
        other = next(option for option in options if option != {"type": "null"})
        if isinstance(other.get("type"), str) and "anyOf" not in other:
            del out["anyOf"]
            out.update({**other, "type": [other["type"], "null"], **out})
    if "patternProperties" in out:
        ((pattern, values),) = out.pop("patternProperties").items()
        out["propertyNames"] = {"pattern": pattern}
        out["additionalProperties"] = values
    prefix = out.pop("prefixItems", None)
    if prefix:
        assert all(item == prefix[0] for item in prefix), prefix  # only tuple[X, X] is used
        out["items"] = prefix[0]
    if out.get("additionalProperties") is True:
        del out["additionalProperties"]
    return _ordered(out)


def _defaults(node: Any) -> Any:
    """``node`` with every default reduced to what the nested defaults do not fill in."""
    if isinstance(node, list):
        return [_defaults(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: (
            value
            if key in ("default", "const", "enum")
            else {name: _defaults(sub) for name, sub in value.items()}
            if key == "properties"
            else _defaults(value)
        )
        for key, value in node.items()
    }
    if "default" in node:
        out["default"] = _smallest(node["default"], node)
    return out


def _smallest(value: Any, node: dict[str, Any]) -> Any:
    """``value`` less every key that Snakemake's validator fills with the same value from ``node``'s nested
    defaults (compared as JSON, so that 1 and 1.0 and True stay apart)."""
    if isinstance(value, dict) and "properties" in node:
        props = node["properties"]
        return {
            key: _smallest(item, props.get(key, {}))
            for key, item in value.items()
            if not ("default" in props.get(key, {}) and _same(props[key]["default"], item))
        }
    if isinstance(value, dict) and isinstance(node.get("additionalProperties"), dict):
        return {key: _smallest(item, node["additionalProperties"]) for key, item in value.items()}
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_smallest(item, node["items"]) for item in value]
    return value


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    rank = {key: i for i, key in enumerate(_ORDER)}
    return dict(sorted(node.items(), key=lambda item: rank.get(item[0], len(_ORDER))))


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of scalars and short mappings of scalars (not described ones) in flow
    style; no anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _flow(data: Any) -> bool:
    scalar = (str, int, float, bool, type(None))
    leaves = data.values() if isinstance(data, dict) else data
    flat = all(isinstance(v, scalar) or isinstance(v, list) and all(isinstance(x, scalar) for x in v) for v in leaves)
    if isinstance(data, list):
        return flat  # wrapped at the width
    return flat and len(json.dumps(data)) <= 90 and "description" not in data


def _represent_dict(dumper: yaml.SafeDumper, data: dict) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data.items(), flow_style=_flow(data) or None)


def _represent_list(dumper: yaml.SafeDumper, data: list) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=_flow(data) or None)


_Dumper.add_representer(dict, _represent_dict)
_Dumper.add_representer(list, _represent_list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infbench.config.schema", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare the committed file with the models")
    parser.add_argument("--path", type=Path, default=SCHEMA, help=f"the schema file (default: {SCHEMA})")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not args.path.is_file() or args.path.read_text() != text:
            print(f"{args.path} differs from the config models; run python -m infbench.config.schema", file=sys.stderr)
            return 1
        return 0
    atomic.write_text(args.path, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
