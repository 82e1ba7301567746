"""CompressionBench submission packages (see docs/submission.md).

A submission is a directory with ``manifest.yaml``, the weights, the tokenizer
and (runtime ``python``) the inference code. Everything in it counts toward
``S_pkg``, hidden files and ``__pycache__/`` included; a link out of the
package is rejected (:mod:`infbench.package_files`). It is only ever loaded in a separate worker process
(:mod:`infbench.compression.worker`), never imported by the pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from infbench.errors import InfbenchError

MANIFEST = "manifest.yaml"
GIB = 2**30


class SubmissionError(InfbenchError):
    """A submission package is malformed; the message names the file and field."""


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    source: str
    runtime: Literal["hf", "llama.cpp", "vllm", "python"]
    weights: str
    tokenizer: str
    entrypoint: str | None = None
    preload: list[str] = []  # runtime python: modules imported before the package, in the baseline worker too
    description: str = ""


def _inside(root: Path, rel: str, field: str, manifest_path: Path) -> Path:
    path = (root / rel).resolve()
    if root.resolve() not in path.parents and path != root.resolve():
        raise SubmissionError(f"{manifest_path}: field '{field}' points outside the package ({rel})")
    if not path.exists():
        raise SubmissionError(f"{manifest_path}: field '{field}': {rel} does not exist in the package")
    return path


def load_manifest(package: str | Path) -> Manifest:
    root = Path(package)
    path = root / MANIFEST
    if not path.is_file():
        raise SubmissionError(f"{path}: manifest missing (every submission needs {MANIFEST})")
    try:
        data = yaml.safe_load(path.read_text())
        manifest = Manifest.model_validate(data)
    except yaml.YAMLError as exc:
        raise SubmissionError(f"{path}: not valid YAML ({exc})") from exc
    except ValidationError as exc:
        fields = "; ".join(f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors())
        raise SubmissionError(f"{path}: {fields}") from exc
    _inside(root, manifest.weights, "weights", path)
    _inside(root, manifest.tokenizer, "tokenizer", path)
    if manifest.runtime == "vllm" and not (root / manifest.weights / "config.json").is_file():
        raise SubmissionError(f"{path}: field 'weights': runtime vllm needs a transformers checkpoint directory")
    if manifest.runtime == "python":
        if not manifest.entrypoint or ":" not in manifest.entrypoint:
            raise SubmissionError(f"{path}: field 'entrypoint': runtime python needs 'file.py:factory'")
        _inside(root, manifest.entrypoint.split(":")[0], "entrypoint", path)
    return manifest


def check_tokenizer(package: str | Path, manifest: Manifest, source_checkpoint: str | Path) -> None:
    """The package's tokenizer must be the source's: same vocabulary and merges."""
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(Path(package) / manifest.tokenizer)
    ours = AutoTokenizer.from_pretrained(source_checkpoint)
    if theirs.get_vocab() != ours.get_vocab():
        raise SubmissionError(
            f"{Path(package) / MANIFEST}: field 'tokenizer': vocabulary differs from source '{manifest.source}'"
        )
    probe = "def f(x):\n    return x ** 2  # Grüße, 数据"
    if theirs(probe, add_special_tokens=False)["input_ids"] != ours(probe, add_special_tokens=False)["input_ids"]:
        raise SubmissionError(
            f"{Path(package) / MANIFEST}: field 'tokenizer': tokenizes differently from source '{manifest.source}'"
        )
