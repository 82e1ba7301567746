"""Teacher-forced log-probs of a likelihood set, the pipeline driving the package (PROTOCOL A3, A5).

Rows go in batches of ``batch_size``. A package whose code is its own (runtime ``python``) gets each batch's
contexts (``prefill``), then the continuation one token at a time (``step``): token ``y_t`` is revealed only
after the package has returned its logits for position ``t``, so a look-ahead has nothing to read. The
pipeline's own runtimes (:data:`~infbench.compression.package_api.TRUSTED`), whose code is causal, compute a
batch in one pass (``score``), which gives what revealing the tokens one at a time would. Either way the
pipeline computes each log-prob as log-softmax of the raw logits at the sampled token.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from infbench.compression.scoring import target_log_probs

# observe(rows, logits [b, positions, V], positions): the raw logits of the scored positions (divergence)
Observe = Callable[[np.ndarray, torch.Tensor, slice], None]


def batches(n: int, batch_size: int) -> list[np.ndarray]:
    return [np.arange(start, min(n, start + batch_size)) for start in range(0, n, batch_size)]


def _in_one_pass(model, contexts, continuations, rows, observe, out) -> None:
    m = continuations.shape[1]
    ids = np.concatenate([contexts[rows], continuations[rows, :-1]], axis=1).astype(np.int64)
    logits = torch.as_tensor(model.score(ids, m))
    out[rows] = target_log_probs(logits, torch.as_tensor(continuations[rows], dtype=torch.long)).numpy()
    if observe is not None:
        observe(rows, logits, slice(0, m))


def _revealed_one_at_a_time(model, contexts, continuations, rows, observe, out) -> None:
    m = continuations.shape[1]
    logits = torch.as_tensor(model.prefill([contexts[r].astype(np.int64) for r in rows], m - 1))
    every = np.arange(len(rows))
    for t in range(m):
        target = torch.as_tensor(continuations[rows, t : t + 1], dtype=torch.long)
        out[rows, t] = target_log_probs(logits[:, None], target).numpy()[:, 0]
        if observe is not None:
            observe(rows, logits[:, None], slice(t, t + 1))
        if t + 1 < m:
            logits = torch.as_tensor(model.step(continuations[rows, t].astype(np.int64), every))


def teacher_forced(
    model,
    contexts: np.ndarray,
    continuations: np.ndarray,
    *,
    batch_size: int,
    one_pass: bool,
    rows: np.ndarray | None = None,
    observe: Observe | None = None,
) -> np.ndarray:
    """Log-probs ``[n, M]`` of ``continuations`` after ``contexts`` (only ``rows``, in that order and those
    batches, where given; the other entries NaN). ``one_pass``: the package is run by the pipeline's own code
    (``score``); otherwise tokens are revealed one at a time."""
    n, m = continuations.shape
    out = np.full((n, m), np.nan, dtype=np.float32)
    order = np.arange(n) if rows is None else np.asarray(rows)
    run = _in_one_pass if one_pass else _revealed_one_at_a_time
    for start in range(0, len(order), batch_size):
        run(model, contexts, continuations, order[start : start + batch_size], observe, out)
    return out
