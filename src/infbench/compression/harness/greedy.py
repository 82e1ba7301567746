"""Batched greedy generation, every token the argmax of the package's own logits (PROTOCOL A5.2, A5.4).

The pipeline prefills a batch of prompts, takes the argmax of each row's logits and feeds it back (``step``)
until the row is done (``done(row, tokens)``: EOS or a stop sequence, decided by the pipeline) or has
``max_new_tokens``; a done row leaves the batch. The package never chooses a token: what it generates is what
its logits say, by construction. The source's ``A(p)`` runs through this same code, with the same batch sizes.

Greedy ties go to the lowest token id (``torch.argmax``). Within a batch, rows padded to a common length may
differ from the same prompt alone in the last bits of their arithmetic, and so, at a near-tie, in a token.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from infbench.compression.scoring import target_log_probs

Done = Callable[[int, list[int]], bool]


@dataclass
class Generated:
    """One row's greedy tokens, the log-prob the model gave each, and when each was known (the harness's clock:
    the moment the logits it is the argmax of arrived)."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)


def _now(model) -> float:
    """When the model's last answer arrived: its own stamp where it keeps one (a worker's reply), else now."""
    return getattr(model, "replied_at", None) or time.perf_counter()


def greedy(model, prompts: list[list[int]], max_new_tokens: int, done: Done | None = None) -> list[Generated]:
    """Greedy continuations of ``prompts`` (one batch)."""
    out = [Generated() for _ in prompts]
    logits = torch.as_tensor(model.prefill([np.asarray(p, dtype=np.int64) for p in prompts], max_new_tokens))
    live = np.arange(len(prompts))
    for _ in range(max_new_tokens):
        stamp = _now(model)
        tokens = torch.argmax(logits.float(), dim=-1)
        logprobs = target_log_probs(logits, tokens).cpu().tolist()
        tokens = tokens.cpu()
        going = []
        for k, (row, token) in enumerate(zip(live.tolist(), tokens.tolist())):
            g = out[row]
            g.tokens.append(int(token))
            g.logprobs.append(float(logprobs[k]))
            g.times.append(stamp)
            if len(g.tokens) < max_new_tokens and not (done is not None and done(row, g.tokens)):
                going.append(k)
        if not going:
            break
        live = live[going]
        logits = torch.as_tensor(model.step(tokens[going].numpy().astype(np.int64), live))
    return out


def in_batches(
    model, prompts: list[list[int]], max_new_tokens: int, batch_size: int, done: Done | None = None
) -> list[Generated]:
    """:func:`greedy` over ``prompts`` in batches of ``batch_size`` (``done`` gets each prompt's index)."""
    out: list[Generated] = []
    for start in range(0, len(prompts), batch_size):
        offset = start

        def done_here(row: int, tokens: list[int], offset=offset) -> bool:
            return done is not None and done(offset + row, tokens)

        out += greedy(model, prompts[start : start + batch_size], max_new_tokens, done_here)
    return out
