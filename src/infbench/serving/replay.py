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

This module is the scheduler and the sending of requests; one replay's settings are
:mod:`infbench.serving.replay_settings`, what a streamed response carried and its token accounting
:mod:`infbench.serving.streamed_response`, the records and their parquet schema
:mod:`infbench.serving.request_records`, the event loop it runs on :mod:`infbench.serving.event_loop`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import orjson

from infbench.serving.endpoints import endpoint
from infbench.serving.event_loop import run_tuned
from infbench.serving.replay_settings import ReplaySettings
from infbench.serving.request_records import RequestRecord
from infbench.serving.sessions import Session, TraceRequest
from infbench.serving.sse import response_limit
from infbench.serving.streamed_response import StreamedResponse, token_accounting
from infbench.serving.workload import FROM_BEGINNING, LaneStart, lane_start, start_fraction

JSON_BODY = {"Content-Type": "application/json"}
# How OpenAI-compatible servers word a prompt that does not fit (vLLM, SGLang, llama.cpp, S0, OpenAI).
CONTEXT_OVERFLOW = re.compile(
    r"context (length|limit|window|size)|maximum context|max_model_len|too many tokens"
    r"|(prompt|input) is too long|longer than the model",
    re.IGNORECASE,
)


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
        stream = StreamedResponse(r.output_tokens, response_limit(len(prompt), r.output_tokens), self.api.piece)
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
        n_out, check_error = token_accounting(
            stream, len(prompt) if self.api.compares_prompt_tokens else None, r.output_tokens
        )
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
