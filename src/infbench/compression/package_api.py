"""The interface a package implements: a causal next-token function that the pipeline drives.

A package never sees a token before it has given its logits for that token's position, and never chooses a
token: the pipeline reveals tokens one at a time (likelihood) or feeds back the argmax of the package's own logits
(greedy generation: the accuracy gate, the decode timing). So a look-ahead has nothing to read and a generated
answer is the model's by construction (docs/submission.md).

Every runtime's runner (:mod:`infbench.compression.runtimes`) and a ``python`` package's object implement:

- ``prefill(rows, max_new_tokens) -> logits[len(rows), V]``: a new batch of ``rows`` (int64 NumPy arrays of
  token ids, of any lengths); the raw logits of each row's last position. The previous batch, if any, is over.
  ``max_new_tokens``: the most steps that will follow (to size a cache).
- ``step(tokens, rows) -> logits[len(rows), V]``: ``rows`` (int64 array, increasing) are the batch rows still
  going, each extended by one token (``tokens``, int64, one per row); the raw logits at the new position of
  each. A row left out of ``rows`` has ended and never comes back.
- ``release() -> None``: drop caches and per-request state (before memory is measured).

Logits are raw and unscaled, over the source's whole vocabulary, as a tensor (any device) or array in float32,
float16 or bfloat16; the pipeline computes every log-probability and argmax itself
(:mod:`infbench.compression.harness`).

Runtimes whose code is the pipeline's own (:data:`TRUSTED`: the package brings weights only) also implement

- ``score(ids, n_last) -> logits[b, n_last, V]``: the teacher-forced logits of the last ``n_last`` positions
  of each row of ``ids`` (int64, ``(b, T)``) in one forward pass. Their code is causal (the runtimes force
  causal attention, :mod:`infbench.compression.runtimes`), so one pass computes exactly what revealing the
  tokens one at a time would; a ``python`` package is never given a token it has not yet scored.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

TRUSTED = ("hf", "llama.cpp", "vllm")
"""Runtimes whose inference code is infbench's: one-pass scoring, no state of the package's own."""


class NextToken(Protocol):
    """What the pipeline drives (a package worker, or the source in-process for ``A(p)``)."""

    def prefill(self, rows: list[np.ndarray], max_new_tokens: int) -> Any: ...

    def step(self, tokens: np.ndarray, rows: np.ndarray) -> Any: ...

    def release(self) -> None: ...
