"""A seeded generator of synthetic coding sessions, written in the AgentX/Weka format.

Each session is a main chain of turns over one growing shared context: turn
``k`` sends the previous prompt, the previous answer and a new tool result, so
its hash ids extend the previous prompt's full blocks. Some turns fan out to
parallel subagents (each starting from the session's system-prompt blocks and
growing its own context), joined by the next main turn; the last turn may leave
a background subagent. Tool results, outputs and think times are log-normal
(heavy-tailed). ``t`` is the recorded start assuming ``nominal_decode_tps``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from infbench import atomic
from infbench.config.model import SyntheticParams
from infbench.seeding import derive_seed


class _Ctx:
    """Per-session state: the hash-id counter and the chain's growing context."""

    def __init__(self, p: SyntheticParams, rng: np.random.Generator):
        self.p, self.rng, self.next_id = p, rng, 0
        self.system_ids = self.new_ids(p.system_tokens // p.block_size)

    def new_ids(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def extend(self, prev_ids: list[int], prev_in: int, new_in: int) -> list[int]:
        """Hash ids of a prompt of ``new_in`` tokens whose first ``prev_in`` are the previous prompt."""
        bs = self.p.block_size
        shared = prev_ids[: prev_in // bs]
        return shared + self.new_ids(math.ceil(new_in / bs) - len(shared))

    def turns(self, mean: float, cap: int) -> int:
        return int(min(cap, self.rng.geometric(1.0 / mean)))

    def out(self) -> int:
        return int(round(self.p.output_tokens.draw(self.rng, hi=self.p.max_output_tokens)))

    def think(self) -> float:
        return round(self.p.think_time_s.draw(self.rng, lo=0.0), 3)


def _request(t: float, n_in: int, n_out: int, ids: list[int], think: float) -> dict[str, Any]:
    return {"t": round(t, 3), "in": n_in, "out": n_out, "hash_ids": ids, "think_time": think}


def _subagent(ctx: _Ctx, t_start: float) -> tuple[dict[str, Any], float]:
    """A subagent chain starting at ``t_start``; returns its entry and its end time."""
    p = ctx.p
    n_in = p.system_tokens + int(round(p.first_user_tokens.draw(ctx.rng)))
    ids = ctx.system_ids + ctx.new_ids(math.ceil(n_in / p.block_size) - len(ctx.system_ids))
    reqs, t = [], t_start
    for k in range(ctx.turns(p.subagent_turns_mean, p.max_main_turns)):
        think = ctx.think()
        t += think
        n_out = ctx.out()
        if k:
            prev_in = reqs[-1]["in"]
            n_in = prev_in + reqs[-1]["out"] + int(round(p.tool_result_tokens.draw(ctx.rng)))
            ids = ctx.extend(reqs[-1]["hash_ids"], prev_in, n_in)
        reqs.append(_request(t, n_in, n_out, ids, think))
        t += n_out / p.nominal_decode_tps
    return {"type": "subagent", "requests": reqs}, t


def session(p: SyntheticParams, seed: int, index: int) -> dict[str, Any]:
    """One Weka trace object, a pure function of (params, seed, index)."""
    rng = np.random.default_rng(derive_seed(seed, "synthetic-session", index))
    ctx = _Ctx(p, rng)
    n_turns = ctx.turns(p.main_turns_mean, p.max_main_turns)
    entries: list[dict[str, Any]] = []
    t, prev = 0.0, None
    pending_join = 0.0  # end time of the latest subagent the next turn waits for
    for k in range(n_turns):
        think = 0.0 if k == 0 else ctx.think()
        t = max(t, pending_join) + think
        n_out = ctx.out()
        if prev is None:
            n_in = p.system_tokens + int(round(p.first_user_tokens.draw(rng)))
            ids = ctx.system_ids + ctx.new_ids(math.ceil(n_in / p.block_size) - len(ctx.system_ids))
        else:
            n_in = prev["in"] + prev["out"] + int(round(p.tool_result_tokens.draw(rng)))
            ids = ctx.extend(prev["hash_ids"], prev["in"], n_in)
        prev = _request(t, n_in, n_out, ids, think)
        entries.append(prev)
        t += n_out / p.nominal_decode_tps
        last = k == n_turns - 1
        fan = 0
        if not last and rng.random() < p.subagent_prob:
            fan = int(rng.integers(1, p.max_fanout + 1))
        elif last and rng.random() < p.background_prob:
            fan = 1
        pending_join = t
        for _ in range(fan):
            entry, end = _subagent(ctx, t)
            entries.append(entry)
            pending_join = max(pending_join, end)
    return {"id": f"synthetic-{seed}-{index:05d}", "block_size": p.block_size, "requests": entries}


def generate(p: SyntheticParams, seed: int, out_path: str | Path) -> int:
    """Write ``p.sessions`` sessions as Weka JSONL (atomically); returns the number written."""
    lines = [json.dumps(session(p, seed, i), separators=(",", ":")) for i in range(p.sessions)]
    atomic.write_text(out_path, "\n".join(lines) + "\n")
    return len(lines)
