"""GGUF baselines: llama.cpp quantization of the F16 twin, and released GGUF files.

Quantization goes through llama.cpp's own ``llama_model_quantize`` (the llama-cpp-python low-level API),
with the source's importance matrix for a type configured ``{type: ..., imatrix: true}`` (config
``compression.gguf_types``; the matrix: :mod:`infbench.compression.baselines.imatrix`). In llama.cpp's API the
matrix is a null-terminated C array of ``llama_model_imatrix_data {name, data, size}`` (``include/llama.h``),
which ctypes builds from the values ``llama-quantize`` passes after reading an imatrix file.

On rows whose width is not a multiple of a type's block (256 for the k-quants and most IQ types; SmolLM2's
576-wide rows), llama.cpp falls back to another type (``src/llama-quant.cpp``). The record of a quantization
lists every fallback from llama.cpp's own log and the type of every tensor from the file written; the
package's real bytes are what count.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from infbench.compression.baselines.package import copy_tokenizer, write_package
from infbench.compression.submission import Manifest
from infbench.errors import ConfigError

WEIGHTS = "model.gguf"
_FALLBACK = re.compile(r"(\S+)\s+-\s+ncols\s+(\d+) not divisible by\s+(\d+) \(required for type\s+(\S+)\)")
_FALLBACK_TO = re.compile(r"falling back to\s+(\S+)")


class Fallback(BaseModel):
    tensor: str
    columns: int
    block: int
    wanted: str
    used: str


class QuantizationRecord(BaseModel):
    """``results/compression/<source>/gguf-<TYPE>[-imatrix].json``: what llama.cpp made of the twin."""

    qtype: str
    imatrix: str | None  # the imatrix file's sha256; None without one
    imatrix_entries: int
    tensor_types: dict[str, str]  # every tensor of the written file -> its GGML type
    type_counts: dict[str, int]
    fallbacks: list[Fallback]
    without_imatrix: list[str]  # tensors llama.cpp quantized without importance data although a matrix was given
    quantize_s: float


def _imatrix_array(weights: dict[str, np.ndarray]):
    """The null-terminated ``llama_model_imatrix_data`` array over ``weights``, and the buffers it points
    into (the caller keeps both alive while llama.cpp reads them)."""
    import llama_cpp

    buffers = {name: np.ascontiguousarray(values, dtype=np.float32) for name, values in sorted(weights.items())}
    array = (llama_cpp.llama_model_imatrix_data * (len(buffers) + 1))()
    for i, (name, values) in enumerate(buffers.items()):
        array[i].name = name.encode()
        array[i].data = values.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        array[i].size = values.size
    array[len(buffers)].name = None
    return array, buffers


@contextlib.contextmanager
def _llama_log(lines: list[str]):
    """llama.cpp's log text goes to ``lines`` (and on to llama-cpp-python's logger) while active."""
    import llama_cpp
    from llama_cpp import _logger

    @llama_cpp.llama_log_callback
    def capture(level, text, user_data):
        lines.append(text.decode("utf-8", errors="replace"))
        _logger.llama_log_callback(level, text, user_data)

    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    try:
        yield
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


def quantize(
    f16_gguf: str | Path,
    out_file: Path,
    qtype: str,
    threads: int,
    *,
    token_embd: str | None = None,
    imatrix: dict[str, np.ndarray] | None = None,
    key: str = "compression.gguf_types",
) -> str:
    """``qtype`` for every tensor llama.cpp quantizes; ``token_embd`` (a GGML type) for the embedding;
    ``imatrix``: importance weights per GGUF tensor name (:func:`imatrix.weights`). llama.cpp's log."""
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
    kept = None
    if imatrix is not None:
        kept = _imatrix_array(imatrix)
        params.imatrix = ctypes.cast(kept[0], ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    lines: list[str] = []
    with _llama_log(lines):
        rc = llama_cpp.llama_model_quantize(str(f16_gguf).encode(), str(out_file).encode(), params)
    del kept
    log = "".join(lines)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({qtype}) returned {rc}: {log[-2000:]}")
    return log


def tensor_types(gguf_file: str | Path) -> dict[str, str]:
    from infbench.gguf_reading import Reader

    return {t.name: t.tensor_type.name for t in Reader(gguf_file).tensors}


def fallbacks(log: str) -> list[Fallback]:
    """The type fallbacks llama.cpp's quantization log reports (a warning line, then the type it used)."""
    out = []
    for m in _FALLBACK.finditer(log):
        used = _FALLBACK_TO.search(log, m.end())
        out.append(
            Fallback(
                tensor=m[1],
                columns=int(m[2]),
                block=int(m[3]),
                wanted=m[4].upper(),
                used=used[1].upper() if used else "?",
            )
        )
    return out


def record(
    qtype: str, log: str, gguf_file: Path, *, imatrix_sha256: str | None, imatrix_entries: int, seconds: float
) -> QuantizationRecord:
    types = tensor_types(gguf_file)
    return QuantizationRecord(
        qtype=qtype,
        imatrix=imatrix_sha256,
        imatrix_entries=imatrix_entries,
        tensor_types=types,
        type_counts=dict(Counter(types.values()).most_common()),
        fallbacks=fallbacks(log),
        without_imatrix=re.findall(r"did not find weights for (\S+)", log) if imatrix_sha256 else [],
        quantize_s=round(seconds, 3),
    )


def candidate_name(qtype: str, imatrix: bool) -> str:
    """``gguf-<TYPE>``, or ``gguf-<TYPE>-imatrix`` for a quantization with the importance matrix."""
    return f"gguf-{qtype}" + ("-imatrix" if imatrix else "")


def quantized_package(
    f16_gguf: str | Path,
    checkpoint: str | Path,
    source: str,
    qtype: str,
    out_dir: str | Path,
    threads: int,
    *,
    imatrix_file: str | Path | None = None,
) -> QuantizationRecord:
    """The package of llama.cpp's ``qtype`` quantization of the twin (with ``imatrix_file``: with that
    importance matrix) and its record."""
    from infbench.compression.baselines import imatrix as imatrix_io
    from infbench.hashing import sha256_file

    weights = imatrix_io.weights(imatrix_file) if imatrix_file is not None else None
    how = f"with the importance matrix {Path(imatrix_file).name}" if imatrix_file is not None else "without imatrix"
    manifest = Manifest(
        name=candidate_name(qtype, imatrix_file is not None),
        source=source,
        runtime="llama.cpp",
        weights=WEIGHTS,
        tokenizer="tokenizer",
        description=f"llama.cpp {qtype} quantization of the F16 twin, {how}",
    )
    made: dict[str, QuantizationRecord] = {}

    def fill(tmp: Path) -> None:
        start = time.monotonic()
        log = quantize(f16_gguf, tmp / WEIGHTS, qtype, threads, imatrix=weights)
        made["record"] = record(
            qtype,
            log,
            tmp / WEIGHTS,
            seconds=time.monotonic() - start,
            imatrix_sha256=sha256_file(imatrix_file) if imatrix_file is not None else None,
            imatrix_entries=len(weights or {}),
        )
        copy_tokenizer(Path(checkpoint), tmp / "tokenizer")

    write_package(out_dir, manifest, fill)
    return made["record"]


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
