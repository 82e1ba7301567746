"""Far-context carriers in replay prompts (PROTOCOL B5; not in the paper).

Synthetic-id prompts have no long-range structure of their own: the model's continuation of a random-id
prompt hardly depends on ids more than ~64 back, so a server that prefills only the end of a prompt (and
reports its full length) would produce nearly the same tokens. A *carrier* gives the prompt structure that
only the whole prompt reveals: its last ``span_tokens`` ids (the cue) repeat the ``span_tokens`` ids at an
earlier *source* position, so a model that reads the whole prompt continues the cue by copying the ids that
follow the source (an induction pattern), which a server that kept fewer than ``distance`` ids cannot know.

- Which requests are carriers (``share`` of those long enough) and where each source lies (uniform between
  the marker and ``max(min_distance, span_tokens + output_tokens)`` before the cue) are drawn from the
  replay's content seed, per session instance: the operator's secret for the final seeds, so nothing about
  them can be known before the round. Carriers have the trace's lengths, ids from the same range, EOS
  ignored: nothing in their form tells them apart.
- The copy is written into the content of the blocks (hash ids) that hold the cue, so every prompt of the
  instance holding a block still sees the same block (prefix caching is unchanged); the blocks a carrier
  reads (its source and the ids after it) and writes (its cue) are locked, so no later carrier changes them.
- Only sessions with a per-session prefix scope carry them (a globally scoped block is shared by every
  instance, and placements are per instance).

What it does not hide: a server that searches each prompt for an earlier copy of its end finds carriers,
and on these synthetic prompts a server that keeps exactly what such a search points at would continue
them as the model does; the check (:mod:`infbench.serving.verify.far_context`) makes plain truncation fail,
not every possible shortcut.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from infbench.config.model import FarContextSettings
from infbench.serving.sessions import Session, TraceRequest

Segment = tuple[str, object]  # ("block", hash id) or ("tail", request id): a unit of prompt content


@dataclass(frozen=True)
class Carrier:
    """One carrier request: its cue ``[cue, cue + span)`` repeats ``[source, source + span)``."""

    request_id: str
    source: int
    cue: int
    span: int

    @property
    def distance(self) -> int:
        """How far back the copied ids lie: from the cue's first id to the source's."""
        return self.cue - self.source

    def copied(self, prompt: list[int], n: int) -> list[int]:
        """The ``n`` ids after the source: what a model that reads the whole prompt copies."""
        return prompt[self.source + self.span : self.source + self.span + n]


def segment_of(request: TraceRequest, block_size: int, position: int) -> tuple[Segment, int]:
    """The content segment holding prompt ``position`` of ``request``, and the offset in it."""
    i = position // block_size
    if i < len(request.hash_ids):
        return ("block", request.hash_ids[i]), position % block_size
    return ("tail", request.id), position - len(request.hash_ids) * block_size


class Store:
    """The content of one session instance's segments: defaults (``blocks``: the rows of the given hash ids,
    ``tail``: a request's ids beyond its hashed blocks), and the carriers' overrides."""

    def __init__(
        self, session: Session, blocks: Callable[[list], np.ndarray], tail: Callable[[TraceRequest], np.ndarray]
    ):
        self.session = session
        self.blocks = blocks
        self.tail = tail
        self.tails: dict[str, np.ndarray] = {}
        self.overrides: dict[Segment, np.ndarray] = {}
        self.overridden: set = set()  # hash ids of the overridden blocks

    def segment(self, seg: Segment, request: TraceRequest) -> np.ndarray:
        if seg in self.overrides:
            return self.overrides[seg]
        kind, name = seg
        if kind == "block":
            return self.blocks([name])[0]
        if name not in self.tails:
            self.tails[name] = self.tail(request)
        return self.tails[name]

    def prompt(self, request: TraceRequest) -> np.ndarray:
        """The request's ids (a new array): its blocks cut to its length, then its tail."""
        bs, n = self.session.block_size, request.input_tokens
        out = self.blocks(request.hash_ids).reshape(-1)[:n] if request.hash_ids else np.zeros(0, np.int64)
        if self.overridden.intersection(request.hash_ids):
            for i, h in enumerate(request.hash_ids):
                if h in self.overridden:
                    out[i * bs : (i + 1) * bs] = self.overrides[("block", h)][: len(out) - i * bs]
        if len(out) < n:
            out = np.concatenate([out, self.segment(("tail", request.id), request)])
        return out

    def token(self, request: TraceRequest, position: int) -> int:
        seg, off = segment_of(request, self.session.block_size, position)
        return int(self.segment(seg, request)[off])

    def put(self, request: TraceRequest, position: int, token: int) -> None:
        seg, off = segment_of(request, self.session.block_size, position)
        if seg not in self.overrides:
            self.overrides[seg] = self.segment(seg, request).copy()
            if seg[0] == "block":
                self.overridden.add(seg[1])
        self.overrides[seg][off] = token

    def segments(self, request: TraceRequest, start: int, stop: int) -> set[Segment]:
        return {segment_of(request, self.session.block_size, p)[0] for p in range(start, stop)}


def place(
    store: Store, settings: FarContextSettings, marker_tokens: int, rng: np.random.Generator
) -> dict[str, Carrier]:
    """Draw and write the carriers of one session instance into ``store``; returns them by request id."""
    locked: set[Segment] = set()
    placed: dict[str, tuple[Carrier, list[int]]] = {}
    span = settings.span_tokens
    for r in store.session.requests:
        chosen, where = rng.random() < settings.share, rng.random()  # two draws per request, always
        cue = r.input_tokens - span
        last = cue - max(settings.min_distance, span + r.output_tokens)  # the latest source position
        if not chosen or last < marker_tokens:
            continue
        cue_segments = store.segments(r, cue, r.input_tokens)
        if cue_segments & locked:
            continue
        source = marker_tokens + int(where * (last - marker_tokens + 1))
        ids = [store.token(r, p) for p in range(source, source + span)]
        for i, t in enumerate(ids):
            store.put(r, cue + i, t)
        locked |= cue_segments | store.segments(r, source, source + span + r.output_tokens)
        placed[r.id] = (
            Carrier(r.id, source, cue, span),
            ids + [store.token(r, p) for p in range(source + span, source + span + r.output_tokens)],
        )
    by_id = {r.id: r for r in store.session.requests}
    # A hash id repeated inside one prompt could alias a write onto a carrier's ids: keep only intact ones.
    return {
        rid: c
        for rid, (c, ids) in placed.items()
        if [store.token(by_id[rid], p) for p in range(c.source, c.source + len(ids))] == ids
        and [store.token(by_id[rid], p) for p in range(c.cue, c.cue + c.span)] == ids[: c.span]
    }
