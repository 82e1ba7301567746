"""Runtimes that run a submission inside the worker process.

Every runtime returns a *runner* with the interface of docs/submission.md:

- ``logits(input_ids: np.ndarray[int64, (b, T)], n_last: int) -> np.ndarray[float32, (b, n_last, V)]``:
  raw, unscaled logits of the last ``n_last`` positions;
- ``generate(input_ids: list[int], max_new_tokens: int) -> Iterator[int]``: greedy
  decoding, one token at a time, EOS not stopping it;
- ``release() -> None``: drop KV caches and other per-request state;
- optionally ``native_resident_bytes() -> int``: model bytes held outside Python
  objects (llama.cpp's tensors), added to the live-tensor count;
- optionally (built-in runtimes only) ``workspace() -> list``: scratch buffers that
  are not model storage (llama.cpp's logits array), left out of the count.
"""

from __future__ import annotations

from pathlib import Path

from infbench.compression.submission import Manifest


def load_runner(package: Path, manifest: Manifest, device: str, threads: int):
    if manifest.runtime == "hf":
        from infbench.compression.runtimes.hf import HFRunner

        return HFRunner(package / manifest.weights, device)
    if manifest.runtime == "llama.cpp":
        from infbench.compression.runtimes.llama_cpp import LlamaCppRunner

        return LlamaCppRunner(package / manifest.weights, threads)
    from infbench.compression.runtimes.python import load_python_runner

    return load_python_runner(package, manifest.entrypoint, device)
