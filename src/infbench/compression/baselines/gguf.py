"""GGUF baselines: llama.cpp quantization of the F16 twin, and released GGUF files.

Quantization goes through llama.cpp's own ``llama_model_quantize`` (the
llama-cpp-python low-level API). On rows that are not a multiple of 256
(SmolLM2's 576), k-quant types fall back to other types inside llama.cpp;
the package's real bytes are what count.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from infbench.compression.baselines.package import copy_tokenizer, write_package
from infbench.compression.submission import Manifest
from infbench.errors import ConfigError

WEIGHTS = "model.gguf"


def quantize(
    f16_gguf: str | Path,
    out_file: Path,
    qtype: str,
    threads: int,
    *,
    token_embd: str | None = None,
    key: str = "compression.gguf_types",
) -> None:
    """``qtype`` for every tensor llama.cpp quantizes; ``token_embd`` (a GGML type) for the embedding."""
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype.upper()}", None)
    if ftype is None:
        raise ConfigError(key, f"unknown llama.cpp quantization type '{qtype}'")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    if token_embd is not None:
        gtype = getattr(llama_cpp, f"GGML_TYPE_{token_embd.upper()}", None)
        if gtype is None:
            raise ConfigError(key, f"unknown GGML tensor type '{token_embd}'")
        params.token_embedding_type = gtype
    rc = llama_cpp.llama_model_quantize(str(f16_gguf).encode(), str(out_file).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({qtype}) returned {rc}")


def quantized_package(
    f16_gguf: str | Path, checkpoint: str | Path, source: str, qtype: str, out_dir: str | Path, threads: int
) -> None:
    manifest = Manifest(
        name=f"gguf-{qtype}",
        source=source,
        runtime="llama.cpp",
        weights=WEIGHTS,
        tokenizer="tokenizer",
        description=f"llama.cpp {qtype} quantization of the F16 twin",
    )

    def fill(tmp: Path) -> None:
        quantize(f16_gguf, tmp / WEIGHTS, qtype, threads)
        copy_tokenizer(Path(checkpoint), tmp / "tokenizer")

    write_package(out_dir, manifest, fill)


def released_package(
    gguf_file: str | Path, checkpoint: str | Path, source: str, name: str, out_dir: str | Path
) -> None:
    path = Path(gguf_file)
    if not path.is_file():
        raise ConfigError(f"compression.released_gguf.{name}", f"{path} does not exist")
    manifest = Manifest(
        name=name,
        source=source,
        runtime="llama.cpp",
        weights=WEIGHTS,
        tokenizer="tokenizer",
        description=f"released GGUF file {path.name}, run unchanged",
    )

    def fill(tmp: Path) -> None:
        shutil.copy2(path, tmp / WEIGHTS)
        copy_tokenizer(Path(checkpoint), tmp / "tokenizer")

    write_package(out_dir, manifest, fill)
