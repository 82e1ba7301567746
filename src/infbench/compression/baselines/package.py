"""Assembling a submission package directory atomically."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from infbench import atomic
from infbench.compression.submission import MANIFEST, Manifest
from infbench.errors import InputFileError
from infbench.layout import Layout

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def copy_tokenizer(checkpoint: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (checkpoint / name).exists():
            shutil.copy2(checkpoint / name, dest / name)


def write_package(out_dir: str | Path, manifest: Manifest, fill) -> None:
    """``fill(tmp_dir)`` writes the weights and code; the manifest is written last."""
    with atomic.atomic_path(out_dir, directory=True) as tmp:
        fill(tmp)
        (tmp / MANIFEST).write_text(yaml.safe_dump(manifest.model_dump(exclude_defaults=True), sort_keys=False))


TEMPLATE_SOURCE = "SOURCE"


def from_template(package: str | Path, results: Layout, source: str) -> Path:
    """``package`` itself, or, for a template (manifest ``source: SOURCE`` and no weights, such as
    examples/starter_submission), the package assembled from it with ``source``'s BF16 checkpoint
    under the results tree's reward packages (:meth:`Layout.reward_package`; rebuilt on every call)."""
    package = Path(package)
    manifest_path = package / MANIFEST
    if not manifest_path.is_file() or yaml.safe_load(manifest_path.read_text()).get("source") != TEMPLATE_SOURCE:
        return package
    checkpoint = Path(results.checkpoint(source))
    if not checkpoint.is_dir():
        raise InputFileError(
            checkpoint,
            f"the template {package} needs {source}'s checkpoint: run `snakemake --cores all {checkpoint}` first",
        )
    out = Path(results.reward_package(source, package.resolve().name))
    starter(package, checkpoint, source, out)
    return out


def starter(example_dir: str | Path, checkpoint: str | Path, source: str, out_dir: str | Path) -> None:
    """The starter package: the example code plus the source's BF16 checkpoint as ``model/``."""
    example = yaml.safe_load((Path(example_dir) / MANIFEST).read_text())
    manifest = Manifest.model_validate({**example, "source": source})

    def fill(tmp: Path) -> None:
        for item in Path(example_dir).iterdir():
            if item.name != MANIFEST and item.is_file():
                shutil.copy2(item, tmp / item.name)
        shutil.copytree(checkpoint, tmp / manifest.weights)

    write_package(out_dir, manifest, fill)


def bf16(checkpoint: str | Path, source: str, out_dir: str | Path) -> None:
    """The BF16 row of the tables: the source checkpoint itself as an ``hf`` package (``F = 1`` against itself)."""
    manifest = Manifest(
        name="bf16",
        source=source,
        runtime="hf",
        weights="model",
        tokenizer="model",
        description=f"{source}'s BF16 checkpoint, unchanged, through transformers",
    )
    write_package(out_dir, manifest, lambda tmp: shutil.copytree(checkpoint, tmp / manifest.weights))


def vllm_twin(package: str | Path, out_dir: str | Path) -> None:
    """``package`` (a transformers checkpoint of the pipeline's own: BF16 or GPTQ) with runtime ``vllm``: a copy
    of the same weights, run by vLLM's engine instead of transformers (``compression.vllm_twins``; docs/vllm.md)."""
    package = Path(package)
    theirs = yaml.safe_load((package / MANIFEST).read_text())
    manifest = Manifest.model_validate(
        {
            **theirs,
            "name": f"{theirs['name']}-vllm",
            "runtime": "vllm",
            "description": f"{theirs.get('description', theirs['name'])}; run by vLLM 0.32.0 (the same weights)",
        }
    )

    def fill(tmp: Path) -> None:  # copies: a package holds its own bytes (no hard link out of it)
        for item in package.iterdir():
            if item.name == MANIFEST:
                continue
            if item.is_dir():
                shutil.copytree(item, tmp / item.name)
            else:
                shutil.copy2(item, tmp / item.name)

    write_package(out_dir, manifest, fill)
