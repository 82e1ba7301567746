"""Closed-loop replay of coding sessions against an OpenAI-compatible server (PROTOCOL B4).

- ``concurrency`` lanes each run one top-level session at a time (its subagent
  branches run concurrently inside it); a lane takes the next session of the
  seeded draw as soon as every request of its session has finished. A lane's
  first session starts at a sampled point of its trace
  (:func:`infbench.serving.workload.lane_start`); later ones from the start.
- A request is sent ``delay_s`` after the last request it depends on finished.
- When nothing is in flight, an idle gap longer than ``idle_cap_s`` until the
  next timed event is capped by moving every pending event earlier by the same
  amount (a virtual clock shift); ``idle_cap_s`` None keeps every recorded delay.
- New requests are sent until ``warmup_s + window_s``; requests still in flight
  then get at most ``request_timeout_s`` in total, so a replay always ends within
  ``warmup_s + window_s + request_timeout_s`` (plus teardown). Sending also stops
  early when the sessions run out (a finite iterator, e.g. a trace in its own
  order) or on :meth:`Replay.stop`; ``Replay.sending_ended`` says when.
- Streaming (aiohttp) ``/v1/completions`` with a token-id prompt, or
  ``/v1/chat/completions`` with it as text (:mod:`infbench.serving.endpoints`),
  ``max_tokens`` = the prescribed output, EOS ignored, usage requested.
- Arrival rule: a token arrives with a chunk that carries its id (``choices[].token_ids``).
  TTFT = arrival of the first chunk carrying at least one token id - send; TPOT =
  (arrival of the last id-carrying chunk - first) / (n_out - 1) (0 for one output
  token); n_out = the number of streamed ids, which usage must equal. Every id's arrival is kept
  (``token_arrivals``, seconds after send; the ids of one chunk share their chunk's), for the
  per-token deadline rule of :mod:`infbench.serving.value`. Text sent
  without ids (whitespace at stream open, say) is never a token: it is counted in
  ``text_chunks_without_ids`` and verification fails it.
- A server that streams no token ids at all (chat completions, most engines' chat
  layouts) is accounted by ``usage`` and timed by its text chunks; such records have
  ``counts_from_token_ids`` false and the development table marks them "unverified
  counts" (verification rejects them).
- A request is *well-formed* only if it streamed to ``[DONE]`` with valid SSE,
  produced exactly ``max_tokens`` tokens by the server's token accounting
  (streamed token ids and usage must agree where both are given) and, for token-id
  prompts, reported the prompt length if usage is given. Anything else is a failure record.
- A request the server refuses because it does not fit its context (an HTTP
  error whose message says so) is also marked ``context_overflow``; scoring
  invalidates a run with too many of them (:mod:`infbench.serving.value`).
"""

from __future__ import annotations

import asyncio
import gc
import heapq
import itertools
import math
import re
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pandas as pd
import pyarrow as pa
import uvloop
from pydantic import BaseModel, ConfigDict, Field

from infbench import atomic
from infbench.config.model import FarContextSettings, ServingCore
from infbench.serving.endpoints import API, Completions, endpoint
from infbench.serving.sse import BoundedLines, response_limit
from infbench.serving.trace import Session, TraceRequest
from infbench.serving.workload import (
    FROM_BEGINNING,
    LaneStart,
    PromptBuilder,
    lane_start,
    public_prompt_seed,
    start_fraction,
)

JSON_BODY = {"Content-Type": "application/json"}
# How OpenAI-compatible servers word a prompt that does not fit (vLLM, SGLang, llama.cpp, S0, OpenAI).
CONTEXT_OVERFLOW = re.compile(
    r"context (length|limit|window|size)|maximum context|max_model_len|too many tokens"
    r"|(prompt|input) is too long|longer than the model",
    re.IGNORECASE,
)


class ReplaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str
    model: str
    concurrency: int = Field(ge=1)
    seed: int
    warmup_s: float = Field(ge=0)
    window_s: float = Field(gt=0)
    request_timeout_s: float = Field(gt=0)
    idle_cap_s: float | None = Field(gt=0, description="None: idle gaps are not capped")
    token_low: int
    token_high: int
    marker_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0)
    start_ratio: tuple[float, float] = Field(
        description="range of the sampled start point of a lane's first session, as fractions of its main chain"
    )
    request_fields: dict[str, Any] = Field(
        default_factory=dict, description="extra JSON fields a server needs, e.g. logit_bias"
    )
    api: API = "completions"
    tokenizer: str | None = Field(default=None, description="chat: the tokenizer.json that turns prompts to text")
    far_context: FarContextSettings | None = Field(
        default=None, description="far-context carriers placed in the prompts (None: none)"
    )
    prompt_seed: int | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="the prompts' content seed; None: the public one of `seed`. "
        "Verification passes one drawn from the operator's secret, "
        "which is never written out with the settings",
    )

    @classmethod
    def for_serving(
        cls,
        serving: ServingCore,
        base_url: str,
        concurrency: int,
        seed: int,
        request_fields: dict[str, Any],
        prompt_seed: int | None = None,
    ) -> ReplaySettings:
        """A replay of ``seed`` as ``serving`` configures it; ``prompt_seed`` None: its prompts' public
        content seed (development, calibration), else the held-out one verification draws from the
        operator's secret."""
        r, w = serving.replay, serving.workload
        low, high = w.token_id_range
        return cls(
            base_url=base_url,
            model=serving.deployment.name,
            concurrency=concurrency,
            seed=seed,
            warmup_s=r.warmup_s,
            window_s=r.window_s,
            request_timeout_s=r.request_timeout_s,
            idle_cap_s=r.idle_cap_s,
            token_low=low,
            token_high=high,
            marker_tokens=w.marker_tokens,
            temperature=r.temperature,
            start_ratio=r.start_ratio,
            request_fields=request_fields,
            far_context=w.far_context,
            prompt_seed=prompt_seed,
        )

    def prompt_builder(self) -> PromptBuilder:
        """The prompts this replay sends (the same for the same content seed and concurrency)."""
        seed = public_prompt_seed(self.seed) if self.prompt_seed is None else self.prompt_seed
        return PromptBuilder(
            token_low=self.token_low,
            token_high=self.token_high,
            marker_tokens=self.marker_tokens,
            content_seed=seed,
            concurrency=self.concurrency,
            carriers=self.far_context,
        )


class RequestRecord(BaseModel):
    """One row of the replay's parquet file; times in seconds since replay start."""

    run_id: str
    instance: int
    session_id: str
    request_id: str
    chain: str
    input_tokens: int
    max_tokens: int
    ready_time: float
    send_time: float
    first_token_time: float
    last_token_time: float
    end_time: float
    in_window: bool
    ok: bool
    error: str
    context_overflow: bool
    instance_requests: int = Field(description="requests of this session instance the replay sends")
    n_chunks: int = Field(description="chunks that carried token ids or text")
    id_chunks: int = Field(description="chunks that carried at least one token id (the arrivals)")
    text_chunks_without_ids: int = Field(description="chunks with text but no token id (never a token arrival)")
    counts_from_token_ids: bool = Field(
        description="output counted and timed by streamed token ids (false: by usage and text chunks, unverified)"
    )
    streamed_token_ids: list[int]
    token_arrivals: list[float] = Field(
        description="arrival of each streamed token id, seconds after send (the "
        "ids of one chunk share their chunk's arrival)"
    )
    text: str
    usage_prompt_tokens: int | None
    usage_completion_tokens: int | None
    output_tokens: int
    ttft: float
    tpot: float
    server_ttft: float | None = Field(description="the server's own first-token minus receive stamp, if it sends them")
    server_receive_time: float | None = Field(description="the server's receive stamp on this clock, if it sends one")


@dataclass
class _Instance:
    number: int
    session: Session
    lane: int
    sent_requests: int
    waiting: dict[str, int]
    dependents: dict[str, list[TraceRequest]]
    outstanding: int


@dataclass(order=True)
class _Event:
    vtime: float
    seq: int
    instance: _Instance = field(compare=False)
    request: TraceRequest = field(compare=False)


class _Stream:
    """What one streamed response carried; a body beyond :func:`~infbench.serving.sse.response_limit` or more
    ids than ``max_tokens`` stop it with an error (the verifier's memory and time stay bounded)."""

    def __init__(
        self,
        max_tokens: int,
        byte_limit: int,
        piece: Callable[[dict[str, Any]], tuple[str, list[int] | None]] = Completions().piece,  # noqa: B008  (stateless)
    ):
        self.piece = piece  # (text, token ids) of one streamed choice, as the endpoint lays it out
        self.max_tokens = max_tokens
        self.lines = BoundedLines(byte_limit)
        self.first_id: float = math.nan  # arrival of the first / last chunk carrying a token id
        self.last_id: float = math.nan
        self.first_text: float = math.nan  # the same for chunks with text (timing of a stream without ids)
        self.last_text: float = math.nan
        self.chunks = 0
        self.id_chunks = 0
        self.text_chunks = 0
        self.text_without_ids = 0
        self.ids: list[int] = []
        self.arrivals: list[float] = []  # of each id, on the replay's clock
        self.text: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.server_ttft: float | None = None
        self.server_receive: float | None = None

    def receive(self, data: bytes, now: float) -> None:
        """One network read, split into lines here rather than a readline per line (a third of the
        client's CPU); every event of a read arrived at the same moment and is stamped once."""
        for line in self.lines.feed(data):
            self.line(line, now)

    def end(self, now: float) -> None:
        """The body ended: its last line may lack a newline."""
        self.line(self.lines.rest(), now)

    def line(self, raw: bytes, now: float) -> None:
        """One SSE line: ``data: <json>`` or ``data: [DONE]``; blank lines and comments are skipped."""
        line = raw.decode().rstrip("\r")
        if not line or line.startswith(":"):
            return
        if self.done or not line.startswith("data:"):
            raise ValueError(f"malformed SSE line{' after [DONE]' * self.done}: {line[:200]!r}")
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
        else:
            self.feed(orjson.loads(data), now)

    def feed(self, payload: dict[str, Any], now: float) -> None:
        if payload.get("usage"):
            self.usage = payload["usage"]
        if "server_receive_time" in payload and self.server_ttft is None:
            self.server_receive = float(payload["server_receive_time"])
            self.server_ttft = float(payload["server_first_token_time"]) - self.server_receive
        choices = payload.get("choices")
        if choices is None:
            if not payload.get("usage"):
                raise ValueError(f"chunk without choices or usage: {str(payload)[:200]}")
            return
        for choice in choices:
            text, ids = self.piece(choice)
            text, ids = text or "", ids or []
            if ids:
                self.ids.extend(int(i) for i in ids)
                self.arrivals.extend([now] * len(ids))
                if len(self.ids) > self.max_tokens:
                    raise ValueError(f"more token ids streamed than max_tokens={self.max_tokens}")
                self.id_chunks += 1
                if math.isnan(self.first_id):
                    self.first_id = now
                self.last_id = now
            if text:
                self.text_chunks += 1
                self.text_without_ids += not ids
                if math.isnan(self.first_text):
                    self.first_text = now
                self.last_text = now
            self.chunks += bool(text or ids)
            self.text.append(text)

    @property
    def saw_ids(self) -> bool:
        return self.id_chunks > 0

    @property
    def first(self) -> float:
        """Arrival of the first token: the first id-carrying chunk (the first text chunk without any ids)."""
        return self.first_id if self.saw_ids else self.first_text

    @property
    def last(self) -> float:
        return self.last_id if self.saw_ids else self.last_text


def _check(stream: _Stream, prompt_len: int | None, max_tokens: int) -> tuple[int, str]:
    """(client-accounted output tokens, error or '') of a finished stream; ``prompt_len`` None: the
    server's prompt token count is not compared (a chat prompt the server tokenizes and templates)."""
    if not stream.done:
        return 0, "stream ended without [DONE]"
    usage_out = stream.usage.get("completion_tokens") if stream.usage else None
    if stream.saw_ids and usage_out is not None and usage_out != len(stream.ids):
        return len(stream.ids), f"usage.completion_tokens={usage_out} but {len(stream.ids)} token ids streamed"
    if stream.saw_ids:
        n_out = len(stream.ids)
    elif usage_out is not None:  # without token ids (unverified counts) a text chunk carries at least one token
        n_out = int(usage_out)
        if not 0 < stream.text_chunks <= n_out:
            return n_out, f"usage.completion_tokens={n_out} but {stream.text_chunks} text chunks streamed"
    else:
        return stream.chunks, "no token accounting (neither token_ids nor usage)"
    if prompt_len is not None and stream.usage and stream.usage.get("prompt_tokens") not in (None, prompt_len):
        return n_out, f"usage.prompt_tokens={stream.usage['prompt_tokens']} but the prompt has {prompt_len}"
    if n_out != max_tokens:
        return n_out, f"{n_out} output tokens, {max_tokens} prescribed"
    return n_out, ""


class Replay:
    """One closed-loop replay run; :meth:`run` returns its request records."""

    def __init__(self, sessions: Iterator[Session], settings: ReplaySettings):
        self.s = settings
        self.sessions = sessions
        self.http: aiohttp.ClientSession | None = None
        self.api = endpoint(settings.api, settings.tokenizer)
        self.url = settings.base_url.rstrip("/") + self.api.path
        self.run_id = uuid.uuid4().hex[:12]
        self.prompts = settings.prompt_builder()
        self.heap: list[_Event] = []
        self.seq = itertools.count()
        self.numbers = itertools.count()
        self.in_flight = 0
        self.idle_since = 0.0
        self.shift = 0.0
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()
        self.records: list[RequestRecord] = []
        self.t0 = 0.0
        self.issuing = True
        self.end = settings.warmup_s + settings.window_s  # sending stops here (earlier on stop())
        self.busy_lanes = 0
        self.sending_ended: float | None = None  # when sending stopped, seconds since start
        self.stopped = False

    # clocks: real = seconds since start; virtual = real + shift (pending events live in virtual time)
    def now(self) -> float:
        return time.perf_counter() - self.t0

    def vnow(self) -> float:
        return self.now() + self.shift

    def _start_session(self, lane: int) -> None:
        """A lane's next session, from its beginning; with none left the lane is done."""
        session = next(self.sessions, None)
        if session is None:
            self.busy_lanes -= 1
            return
        self._start(lane, session, FROM_BEGINNING)

    def stop(self) -> None:
        """Stop sending now; once sending has stopped, also cancel what is in flight. The records of
        everything sent are kept."""
        if not self.issuing or self.stopped:
            for task in list(self.tasks):
                task.cancel()
            return
        self.stopped = True
        self.end = min(self.end, self.now())
        self.wake.set()

    def _start(self, lane: int, session: Session, start: LaneStart) -> None:
        """Run ``session`` on ``lane``; the requests ``start`` skips are taken as done and never sent."""
        sent = [r for r in session.requests if r.id not in start.skipped]
        inst = _Instance(
            number=next(self.numbers),
            session=session,
            lane=lane,
            sent_requests=len(sent),
            waiting={r.id: sum(d not in start.skipped for d in r.depends_on) for r in sent},
            dependents={r.id: [] for r in sent},
            outstanding=len(sent),
        )
        for r in sent:
            for dep in r.depends_on:
                if dep not in start.skipped:
                    inst.dependents[dep].append(r)
        v = self.vnow()
        for r in sent:
            if not r.depends_on:
                self._push(inst, r, v + r.delay_s)
            elif start.ready(r):  # what it waits for happened before the lane's start point
                self._push(inst, r, v + start.offset(r))

    def _push(self, inst: _Instance, r: TraceRequest, vtime: float) -> None:
        heapq.heappush(self.heap, _Event(vtime, next(self.seq), inst, r))
        self.wake.set()

    def _finished(self, inst: _Instance, r: TraceRequest) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle_since = self.vnow()
        v = self.vnow()
        for d in inst.dependents[r.id]:
            inst.waiting[d.id] -= 1
            if inst.waiting[d.id] == 0:
                self._push(inst, d, v + d.delay_s)
        inst.outstanding -= 1
        if inst.outstanding == 0 and self.issuing:
            self._start_session(inst.lane)
        self.wake.set()

    async def run(self) -> list[RequestRecord]:
        # aiohttp rather than httpx: half the client CPU per streamed request (C HTTP parser), which is
        # latency added to every TTFT once hundreds of streams share the client's core (bench-replay).
        # No connection limit; every request's own deadline is applied in _send.
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=connector, read_bufsize=2**22, timeout=aiohttp.ClientTimeout(total=None)
        ) as self.http:
            return await self._run()

    async def _run(self) -> list[RequestRecord]:
        self.t0 = time.perf_counter()
        for lane in range(self.s.concurrency):
            session = next(self.sessions, None)
            if session is None:
                break
            self.busy_lanes += 1
            self._start(lane, session, lane_start(session, start_fraction(self.s.seed, lane, self.s.start_ratio)))
        while self.now() < self.end and self.busy_lanes:
            self.wake.clear()
            if self.s.idle_cap_s is not None and self.heap and self.in_flight == 0:
                gap = self.heap[0].vtime - self.idle_since
                if gap > self.s.idle_cap_s:
                    self.shift += gap - self.s.idle_cap_s
                    self.idle_since += gap - self.s.idle_cap_s
            wait = self.end - self.now()
            if self.heap:
                wait = min(wait, self.heap[0].vtime - self.vnow())
            if wait > 0:
                try:
                    await asyncio.wait_for(self.wake.wait(), timeout=wait)
                except TimeoutError:
                    pass
                continue
            if not self.heap:  # the window ended between the loop's test and now: nothing is due
                continue
            ev = heapq.heappop(self.heap)
            ready = ev.vtime - self.shift
            self.in_flight += 1
            task = asyncio.create_task(self._send(ev.instance, ev.request, ready))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        self.issuing = False
        self.sending_ended = min(self.now(), self.end)
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=self.s.request_timeout_s + 1.0)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        return sorted(self.records, key=lambda r: r.send_time)

    async def _send(self, inst: _Instance, r: TraceRequest, ready: float) -> None:
        prompt = self.prompts.build(inst.session, inst.number, r)
        body = {
            "model": self.s.model,
            **self.api.prompt_fields(prompt),
            "max_tokens": r.output_tokens,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
            "temperature": self.s.temperature,
            **self.s.request_fields,
        }
        stream = _Stream(r.output_tokens, response_limit(len(prompt), r.output_tokens), self.api.piece)
        error = ""
        overflow = False
        send = self.now()
        try:
            async with asyncio.timeout(self.s.request_timeout_s):
                async with self.http.post(self.url, data=orjson.dumps(body), headers=JSON_BODY) as resp:
                    if resp.status != 200:
                        detail = (await resp.content.read(300)).decode(errors="replace")
                        overflow = bool(CONTEXT_OVERFLOW.search(detail))
                        raise ValueError(f"HTTP {resp.status}: {detail}")
                    # Read to the end of the body even after [DONE]: a response left unread closes
                    # its keep-alive connection, and every request would pay a new TCP handshake.
                    async for data in resp.content.iter_any():
                        stream.receive(data, self.now())
                    stream.end(self.now())
        except TimeoutError:
            error = f"timed out after {self.s.request_timeout_s} s"
        except asyncio.CancelledError:
            error = "cancelled at replay end"
        except (aiohttp.ClientError, ValueError, TypeError, KeyError, AttributeError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:500]
        end = self.now()
        n_out, check_error = _check(stream, len(prompt) if self.api.compares_prompt_tokens else None, r.output_tokens)
        error = error or check_error
        ttft = stream.first - send
        tpot = 0.0 if n_out == 1 else (stream.last - stream.first) / (n_out - 1) if n_out > 1 else math.nan
        usage = stream.usage or {}
        self.records.append(
            RequestRecord(
                run_id=self.run_id,
                instance=inst.number,
                session_id=inst.session.id,
                request_id=r.id,
                chain=r.chain,
                input_tokens=len(prompt),
                max_tokens=r.output_tokens,
                ready_time=ready,
                send_time=send,
                first_token_time=stream.first,
                last_token_time=stream.last,
                end_time=end,
                in_window=self.s.warmup_s <= send < self.s.warmup_s + self.s.window_s,
                ok=not error,
                error=error,
                context_overflow=overflow,
                instance_requests=inst.sent_requests,
                n_chunks=stream.chunks,
                id_chunks=stream.id_chunks,
                text_chunks_without_ids=stream.text_without_ids,
                counts_from_token_ids=stream.saw_ids,
                streamed_token_ids=stream.ids,
                token_arrivals=[a - send for a in stream.arrivals],
                text="".join(stream.text),
                usage_prompt_tokens=usage.get("prompt_tokens"),
                usage_completion_tokens=usage.get("completion_tokens"),
                output_tokens=n_out,
                ttft=ttft if not error else math.nan,
                tpot=tpot if not error else math.nan,
                server_ttft=stream.server_ttft,
                server_receive_time=None if stream.server_receive is None else stream.server_receive - self.t0,
            )
        )
        self._finished(inst, r)


def run(sessions: Iterator[Session], settings: ReplaySettings) -> list[RequestRecord]:
    return run_tuned(Replay(sessions, settings).run())


def run_tuned(main: Coroutine[Any, Any, list[RequestRecord]]) -> list[RequestRecord]:
    """Run a replay's coroutine on uvloop with the garbage collector tuned for it."""
    # The cyclic garbage collector stops the event loop for tens of ms when it scans the young objects
    # hundreds of streams make (bench-replay saw a 44 ms pause): what exists before the replay is frozen
    # out of its scans and it runs 50x less often; reference counting still frees almost everything.
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(35_000, *threshold[1:])
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


RECORD_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("instance", pa.int64()),
        ("session_id", pa.string()),
        ("request_id", pa.string()),
        ("chain", pa.string()),
        ("input_tokens", pa.int64()),
        ("max_tokens", pa.int64()),
        ("ready_time", pa.float64()),
        ("send_time", pa.float64()),
        ("first_token_time", pa.float64()),
        ("last_token_time", pa.float64()),
        ("end_time", pa.float64()),
        ("in_window", pa.bool_()),
        ("ok", pa.bool_()),
        ("error", pa.string()),
        ("context_overflow", pa.bool_()),
        ("instance_requests", pa.int64()),
        ("n_chunks", pa.int64()),
        ("id_chunks", pa.int64()),
        ("text_chunks_without_ids", pa.int64()),
        ("counts_from_token_ids", pa.bool_()),
        ("streamed_token_ids", pa.list_(pa.int64())),
        ("token_arrivals", pa.list_(pa.float64())),
        ("text", pa.string()),
        ("usage_prompt_tokens", pa.int64()),
        ("usage_completion_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("ttft", pa.float64()),
        ("tpot", pa.float64()),
        ("server_ttft", pa.float64()),
        ("server_receive_time", pa.float64()),
    ]
)


def write_records(records: list[RequestRecord], path: str) -> pd.DataFrame:
    """The records as parquet with :data:`RECORD_SCHEMA` (typed even when a replay completed nothing)."""
    frame = pd.DataFrame([r.model_dump() for r in records], columns=list(RequestRecord.model_fields))
    atomic.write_parquet(path, frame, RECORD_SCHEMA)
    return frame
