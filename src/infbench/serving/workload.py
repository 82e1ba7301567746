"""Workload preparation (PROTOCOL B4): scaling, context eligibility, seeded draws, prompts.

- Optional length scaling for small deployments multiplies every length and the
  block size by the same factor, so shared prefixes keep their proportions; the
  factor is recorded.
- Eligibility keeps or drops whole sessions against the context limit; prompts
  are never truncated.
- A draw is a seeded, endless sequence of sessions (fresh permutation per pass).
- A lane's first session starts at a sampled point of its trace (as AgentX
  does, ``trajectory_start_{min,max}_ratio``): a fraction ``u`` drawn per seed
  and lane from ``start_ratio`` picks main-chain request ``floor(u * n_main)``;
  every request recorded before it counts as already done and is not sent, so
  the replay starts with grown contexts rather than every lane at turn one.
- Prompts are token ids (:class:`PromptBuilder`), every id drawn from a replay's
  content seed: only the prefix structure (which requests share which blocks) is
  public. A final (held-out) replay's content seed comes from the operator's
  secret, per seed (:func:`held_out_prompt_seed`), so nothing about its prompts
  can be computed before the round; development, calibration and coverage
  replays use a public one (:func:`public_prompt_seed`), as their draws do.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from infbench import atomic, provenance
from infbench.config.model import FarContextSettings
from infbench.errors import ConfigError, InputFileError
from infbench.hashing import file_hashes, sha256_file
from infbench.operator_secret import OperatorSecret
from infbench.seeding import derive_seed
from infbench.serving.carriers import Carrier, Store, place
from infbench.serving.sessions import Session, TraceRequest
from infbench.serving.traces import read_trace


class WorkloadSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    trace: str
    trace_format: str
    sessions_read: int
    sessions_eligible: int
    sessions_dropped: int
    length_scale: float
    context_limit: int
    requests: int
    input_tokens: int
    output_tokens: int
    provenance: provenance.Provenance


def scale(session: Session, factor: float) -> Session:
    """Lengths and block size times ``factor`` (block size must stay an integer)."""
    if factor == 1.0:
        return session
    block = session.block_size * factor
    if block < 1 or abs(block - round(block)) > 1e-9:
        raise ConfigError(
            "serving.workload.length_scale",
            f"{factor} times block size {session.block_size} is not a whole number of tokens",
        )
    reqs = [
        r.model_copy(
            update={
                "input_tokens": math.ceil(r.input_tokens * factor),
                "output_tokens": max(1, math.ceil(r.output_tokens * factor)),
            }
        )
        for r in session.requests
    ]
    return session.model_copy(update={"block_size": int(round(block)), "requests": reqs})


def eligible(sessions: list[Session], context_limit: int) -> list[Session]:
    """Whole sessions whose every request (prompt + output) fits ``context_limit``."""
    return [s for s in sessions if s.max_context <= context_limit]


def prepare(
    trace_path: str,
    trace_format: str,
    *,
    length_scale: float,
    context_limit: int,
    block_size: int,
    out_sessions: str,
    out_summary: str,
) -> WorkloadSummary:
    """Read, scale and filter a trace; write the eligible sessions (JSONL) and a summary."""
    sessions = read_trace(trace_path, trace_format, block_size)
    scaled = [scale(s, length_scale) for s in sessions]
    kept = eligible(scaled, context_limit)
    if not kept:
        raise ConfigError(
            "serving.deployment.context_limit",
            f"no session of {trace_path} fits {context_limit} tokens "
            f"(after length scale {length_scale}); nothing to replay",
        )
    params = {"trace_format": trace_format, "length_scale": length_scale, "context_limit": context_limit}
    summary = WorkloadSummary(
        trace=str(trace_path),
        trace_format=trace_format,
        sessions_read=len(sessions),
        sessions_eligible=len(kept),
        sessions_dropped=len(sessions) - len(kept),
        length_scale=length_scale,
        context_limit=context_limit,
        requests=sum(len(s.requests) for s in kept),
        input_tokens=sum(s.total_input_tokens for s in kept),
        output_tokens=sum(r.output_tokens for s in kept for r in s.requests),
        provenance=provenance.collect(params, trace_hashes(trace_path)),
    )
    atomic.write_text(out_sessions, "".join(s.model_dump_json() + "\n" for s in kept))
    atomic.write_json(out_summary, summary.model_dump(mode="json"))
    return summary


def trace_hashes(trace_path: str | Path) -> dict[str, str]:
    """sha256 of a trace file, or of every file of a trace directory (keyed by path)."""
    path = Path(trace_path)
    if path.is_dir():
        return {str(path / name): digest for name, digest in file_hashes(path).items()}
    return {str(path): sha256_file(path)}


def load(path: str | Path) -> list[Session]:
    """Sessions written by :func:`prepare`."""
    path = Path(path)
    out = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            out.append(Session.model_validate_json(line))
        except ValueError as exc:
            raise InputFileError(path, f"line {lineno}: {exc}") from None
    if not out:
        raise InputFileError(path, "no sessions")
    return out


def draw(sessions: list[Session], seed: int) -> Iterator[Session]:
    """The endless seeded sequence of sessions a replay with ``seed`` takes them from."""
    rng = np.random.default_rng(derive_seed(seed, "session-draw"))
    while True:
        for i in rng.permutation(len(sessions)):
            yield sessions[int(i)]


def check_disjoint(seed_sets: dict[str, list[int]]) -> None:
    """Development, final, calibration and coverage seeds must never overlap."""
    names = sorted(seed_sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            common = set(seed_sets[a]) & set(seed_sets[b])
            if common:
                raise ConfigError(f"serving.seeds.{b}", f"shares seeds {sorted(common)[:5]} with {a}")


class LaneStart(BaseModel):
    """Where a lane's first session starts: the requests taken as already done, and the recorded time ``t*``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    t_star: float
    skipped: frozenset[str]

    def offset(self, request: TraceRequest) -> float:
        """When a request none of whose sent dependencies remain is due, relative to the lane's start."""
        return max(0.0, request.t - self.t_star)

    def ready(self, request: TraceRequest) -> bool:
        """Sent, and waiting for no response: ready to advance when the replay begins (after its offset)."""
        return request.id not in self.skipped and all(d in self.skipped for d in request.depends_on)


FROM_BEGINNING = LaneStart(t_star=0.0, skipped=frozenset())


def start_fraction(seed: int, lane: int, start_ratio: tuple[float, float]) -> float:
    lo, hi = start_ratio
    return float(np.random.default_rng(derive_seed(seed, "lane-start", lane)).uniform(lo, hi)) if hi > lo else lo


def lane_start(session: Session, fraction: float) -> LaneStart:
    """Skip the requests recorded before main-chain request ``floor(fraction * n_main)`` (never the last one)."""
    main = sorted((r for r in session.requests if r.chain == session.main_chain.id), key=lambda r: r.t)
    k = min(int(fraction * len(main)), len(main) - 1)
    t_star = main[k].t
    return LaneStart(t_star=t_star, skipped=frozenset(r.id for r in session.requests if r.t < t_star))


def initial_streams(session: Session, start: LaneStart) -> int:
    """Chains of ``session`` with a request ready to advance when a lane begins at ``start``."""
    return len({r.chain for r in session.requests if start.ready(r)})


def public_prompt_seed(seed: int) -> int:
    """The content seed of a development, calibration or coverage replay: public, as its draw seed is."""
    return derive_seed(seed, "replay-prompts")


def held_out_prompt_seed(secret: OperatorSecret, seed: int) -> int:
    """The content seed of a final (held-out) replay: drawn from the operator's secret, per seed."""
    return secret.seed("serving.replay_prompts", seed)


class PromptBuilder(BaseModel):
    """Token-id prompts of one replay, every id drawn from ``content_seed``.

    Block ``h`` of a session instance is a block of ids drawn for (session, instance, h), so equal hash ids
    give identical blocks within the instance (a globally scoped trace: within the replay); ids beyond the
    hashed blocks are drawn per request; the first ``marker_tokens`` are the instance's marker (drawn for the
    concurrency and instance, so two instances, or two replays of a seed at different ``c`` on one server,
    never share a cached prefix); ``carriers`` places far-context carriers (:mod:`.carriers`). The same
    content seed and concurrency give the same prompts.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    token_low: int = Field(ge=0)
    token_high: int
    marker_tokens: int = Field(ge=1)
    content_seed: int
    concurrency: int = Field(ge=1)
    carriers: FarContextSettings | None = None
    _instances: OrderedDict = PrivateAttr(default_factory=OrderedDict)

    def build(self, session: Session, instance: int, request: TraceRequest) -> list[int]:
        out = self._instance(session, instance)[0].prompt(request)
        n = min(self.marker_tokens, len(out))
        out[:n] = _draw(self.token_low, self.token_high, n, self.content_seed, "marker", self.concurrency, instance)
        return out.tolist()

    def carrier(self, session: Session, instance: int, request_id: str) -> Carrier | None:
        """The far-context carrier placed in that request, if any."""
        return self._instance(session, instance)[1].get(request_id)

    def _instance(self, session: Session, instance: int) -> tuple[Store, dict[str, Carrier]]:
        key = (session.id, instance)
        if key in self._instances:
            self._instances.move_to_end(key)
            return self._instances[key]
        low, high, bs, seed = self.token_low, self.token_high, session.block_size, self.content_seed
        if session.prefix_scope == "session":
            rows = {h: i for i, h in enumerate(sorted({h for r in session.requests for h in r.hash_ids}))}
            table = _draw(low, high, (len(rows), bs), seed, "blocks", session.id, instance)

            def blocks(hash_ids: list) -> np.ndarray:
                return table[[rows[h] for h in hash_ids]]
        else:

            def blocks(hash_ids: list) -> np.ndarray:
                return np.stack([_global_block(low, high, bs, seed, h) for h in hash_ids])

        def tail(r: TraceRequest) -> np.ndarray:
            n = r.input_tokens - len(r.hash_ids) * bs
            return _draw(low, high, n, seed, "tail", session.id, instance, r.id)

        store = Store(session, blocks, tail)
        carriers = {}
        if self.carriers and self.carriers.share > 0 and session.prefix_scope == "session":
            rng = np.random.default_rng(derive_seed(seed, "carriers", session.id, instance))
            carriers = place(store, self.carriers, self.marker_tokens, rng)
        self._instances[key] = (store, carriers)
        if len(self._instances) > INSTANCE_CACHE:
            self._instances.popitem(last=False)
        return store, carriers


INSTANCE_CACHE = 256  # session instances whose content a builder keeps (each is rebuilt the same if evicted)


def _draw(low: int, high: int, shape, seed: int, *names: object) -> np.ndarray:
    return np.random.default_rng(derive_seed(seed, *names)).integers(low, high, shape)


@lru_cache(maxsize=65536)
def _global_block(low: int, high: int, size: int, seed: int, hash_id: int) -> np.ndarray:
    block = _draw(low, high, size, seed, "global-block", hash_id)
    block.flags.writeable = False
    return block
