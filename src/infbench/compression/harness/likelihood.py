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


def answers_teacher_forced(
    model, prompts: list[list[int]], answers: list[list[int]], *, batch_size: int, one_pass: bool
) -> list[np.ndarray]:
    """Log-probs of each of ``answers`` (token ids, any lengths, each at least one) after its prompt: the
    pipeline's own runtimes one row at a time in one pass each (rows of different lengths), a package of its own
    by revealing the answer's tokens one at a time, rows ending with their answers."""
    out: list[np.ndarray] = []
    if one_pass:
        for prompt, answer in zip(prompts, answers):
            ids = np.asarray([[*prompt, *answer[:-1]]], dtype=np.int64)
            logits = torch.as_tensor(model.score(ids, len(answer)))
            out.append(target_log_probs(logits, torch.as_tensor([answer], dtype=torch.long)).numpy()[0])
        return out
    for start in range(0, len(prompts), batch_size):
        rows = range(start, min(len(prompts), start + batch_size))
        longest = max(len(answers[r]) for r in rows)
        scored = {r: np.empty(len(answers[r]), dtype=np.float32) for r in rows}
        logits = torch.as_tensor(model.prefill([np.asarray(prompts[r], dtype=np.int64) for r in rows], longest - 1))
        live = np.arange(len(rows))
        for t in range(longest):
            row_ids = [start + int(k) for k in live]
            target = torch.as_tensor([[answers[r][t]] for r in row_ids], dtype=torch.long)
            for r, lp in zip(row_ids, target_log_probs(logits[:, None], target).numpy()[:, 0]):
                scored[r][t] = lp
            going = [k for k, r in enumerate(row_ids) if t + 1 < len(answers[r])]
            if not going:
                break
            live = live[going]
            tokens = np.asarray([answers[start + int(k)][t] for k in live], dtype=np.int64)
            logits = torch.as_tensor(model.step(tokens, live))
        out += [scored[r] for r in rows]
    return out
