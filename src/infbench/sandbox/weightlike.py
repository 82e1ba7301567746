"""Whether a file of the Python runtime looks like model weights: the second layer of the runtime allowlist.

The first layer (:mod:`.runtime`) binds only the distributions a sandbox needs; this one hides, inside what is
bound, every file that could carry a model anyway, by its name and by its content:

- a weight format's name anywhere in the file name (``model.gguf``, ``model.gguf.part03``,
  ``w.safetensors.00001``), from :data:`MIN_BYTES` up;
- a weight format's magic bytes at the start: GGUF, safetensors (an 8-byte header length, then JSON), zip
  (PyTorch checkpoints), NumPy ``.npy``, pickle, HDF5, ONNX/protobuf is not recognisable and falls to the next
  rule;
- high entropy: quantised or compressed tensors (a GGUF split into parts has no magic after its first part)
  read as nearly random bytes, source code and shared libraries do not;
- any file of :data:`LARGE_BYTES` or more.

Shared libraries (ELF) are never hidden: the runtime cannot load without them, and what a distribution ships
as a library is code the operator installed.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

MIN_BYTES = 1 << 20  # smaller files are not looked at (a model in many small parts is caught by layer 1)
LARGE_BYTES = 64 << 20  # non-library files this large are hidden whatever they hold
ENTROPY_BITS = 6.0  # bits per byte: BF16 weights read 6.5, quantised ones 7.2, code and text 4-5.7
SAMPLE_BYTES = 1 << 16
SAMPLES = 4

WEIGHT_NAMES = re.compile(
    r"\.(gguf|ggml|safetensors|bin|pt|pth|ckpt|onnx|npz|npy|h5|hdf5|msgpack|pkl|pickle|"
    r"model|tflite|mlmodel|params|weights)(\.|$|-)",
    re.IGNORECASE,
)
MAGICS = (
    b"GGUF",
    b"GGML",
    b"GGJT",
    b"PK\x03\x04",
    b"\x93NUMPY",
    b"\x89HDF\r\n\x1a\n",
    b"\x80\x02",
    b"\x80\x03",
    b"\x80\x04",
    b"\x80\x05",
)
ELF = b"\x7fELF"


def _safetensors(head: bytes) -> bool:
    if len(head) < 10:
        return False
    n = int.from_bytes(head[:8], "little")
    return 2 <= n < 100 << 20 and head[8:9] == b"{"


def entropy_bits(samples: list[bytes]) -> float:
    """Shannon entropy in bits per byte of the concatenated samples."""
    data = np.frombuffer(b"".join(samples), dtype=np.uint8)
    if data.size == 0:
        return 0.0
    p = np.bincount(data, minlength=256) / data.size
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def _samples(path: str, size: int) -> list[bytes]:
    out = []
    with open(path, "rb") as f:
        for i in range(SAMPLES):
            f.seek(max(0, (size - SAMPLE_BYTES) * i // max(1, SAMPLES - 1)))
            out.append(f.read(SAMPLE_BYTES))
    return out


def reason(path: str, size: int) -> str | None:
    """Why the file at ``path`` (``size`` bytes) looks like weights, or None."""
    if size < MIN_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if head.startswith(ELF):
        return None
    if WEIGHT_NAMES.search(os.path.basename(path)):
        return "weight format name"
    if head.startswith(MAGICS) or _safetensors(head):
        return "weight format magic"
    if size >= LARGE_BYTES:
        return f"{size / 2**20:.0f} MiB, not a shared library"
    try:
        bits = entropy_bits(_samples(path, size))
    except OSError:
        return None
    if bits >= ENTROPY_BITS and not math.isnan(bits):
        return f"entropy {bits:.2f} bits/byte"
    return None
