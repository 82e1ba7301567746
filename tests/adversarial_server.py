"""Servers that do less work than they claim, for the verification tests (a real process on loopback).

The S0 engine (transformers, one lock) behind a small OpenAI-style streaming endpoint that cheats
as ``--mode`` says:

- ``truncate``: keeps only the last quarter of the context limit of a long prompt (and reports the
  tokens it kept as ``usage.prompt_tokens``);
- ``truncate_quiet``: truncates the same way but reports the full prompt length;
- ``stop_early``: generates half of ``max_tokens`` and stops;
- ``pad``: two real tokens, then one fixed token up to ``max_tokens``;
- ``random``: random token ids instead of the model's;
- ``other``: greedy tokens of another model (``--other-model``);
- ``crash_prefix``: exits when a prompt repeats the first 32 tokens of an earlier one (a reused prefix);
- ``no_eos``: ignores EOS even when asked to stop at it;
- ``fake_first``: honest, plus a ``{"text": " ", "token_ids": []}`` chunk the moment the stream opens
  (a fake early first token);
- ``cheap_later``: honest for its first ``--honest-requests`` requests or ``--honest-s`` seconds
  (300, 20 s), then random tokens for replay traffic (EOS ignored, a prompt short of the context
  limit); what looks like a probe (near the context limit, or EOS stopping on) stays honest;
- ``probe_aware``: ignores EOS and refuses prompts near the context limit, except on the probe prompts
  the public config and code used to determine (context-probe fillers and EOS-probe candidates from
  fixed seeds, the fixed chat requests), which it answers honestly;
- ``usage_lies``: generates half of ``max_tokens``, streams their text in one chunk without token ids
  and reports ``max_tokens`` in usage;
- ``flood``: honest for its first ``--honest-requests`` requests, then answers replay traffic (not what
  looks like a probe) in turn with an SSE line that never ends, one 16 MiB chunk, and token chunks past
  ``max_tokens`` forever: what the verifier's own limits must stop;
- ``keep_last``: prefills replay prompts (EOS ignored, short of the context limit) from their last
  ``--keep`` ids only and reports their full length; honest on what looks like a probe. With
  ``--engine llamacpp`` (``--model`` a GGUF file) it is llama.cpp behind the package's OpenAI layer;
- ``table``: answers from a table of greedy continuations precomputed offline for the prompts the public
  code and config determine (``--table``, JSON ``{"exact": {sha256 of the prompt: ids}, "by_length":
  {"<prompt tokens>/<max_tokens>": ids}}``) without a model call: a prompt in the table gets its
  continuation, another one the continuation of a precomputed prompt of the same lengths; only what
  looks like a probe reaches the model. It logs ``table exact|by_length|model`` per request;
- ``eos_answers``: honest, except that what looks like a held-out question (EOS stopping on, the prompt ending
  with ``Answer:``) is answered with EOS at once;
- ``weak_answers``: honest, except that what looks like a held-out question is answered greedily by another,
  weaker model (``--other-model``);
- ``quiet_then_cheap``: keeps the last ``--keep`` ids of every prompt while requests keep coming and is honest on
  anything sent after it was idle for ``--honest-s`` seconds or more (what follows the replay: probes, questions):
  checks told apart by timing and order, not content. With ``--engine llamacpp`` too;
- ``ok``: honest.

``--carrier-aware`` (with ``keep_last``): a prompt whose last 16 ids occur earlier in it (a far-context carrier,
found by content) is prefilled whole. ``--pool`` (with ``--engine llamacpp``): a pool of one-thread llama.cpp
engines, one per CPU the process sees (``os.cpu_count()``), requests spread over them (more hardware than the
deployment is charged for, unless the sandbox holds it to its share). ``--spin-pool``: with any mode, also start
one busy process per CPU ``os.cpu_count()`` reports (a pool that would take every core of the host); ``GET
/affinity`` answers each one's CPU affinity.

Run: ``python adversarial_server.py --model DIR --port P --mode M [--context-limit N] [--other-model DIR]
[--keep N] [--table FILE] [--engine transformers|llamacpp] [--carrier-aware] [--pool] [--spin-pool]``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from infbench.serving.openai_app import CompletionRequest
from infbench.serving.starter import TransformersEngine

MODES = (
    "ok",
    "truncate",
    "truncate_quiet",
    "stop_early",
    "pad",
    "random",
    "other",
    "crash_prefix",
    "no_eos",
    "fake_first",
    "cheap_later",
    "probe_aware",
    "usage_lies",
    "flood",
    "keep_last",
    "table",
    "eos_answers",
    "weak_answers",
    "quiet_then_cheap",
)
FLOODS = ("endless_line", "oversize", "endless_tokens")
# What the verifier's probes were drawn from before the operator's secret: public seeds and a public list.
PUBLIC_CHAT_REQUESTS = (
    "Say hello.",
    "What is 2+2?",
    "Reply with one word: yes or no.",
    "Name a colour.",
    "Say goodbye.",
    "What is the capital of France?",
    "Give me a number.",
    "Say OK.",
    "Thank you!",
    "What day comes after Monday?",
    "Spell cat.",
    "Is water wet?",
)
PUBLIC_TOKEN_RANGE = (1000, 30000)  # serving.workload.token_id_range of the public config


def public_seed(*names: object) -> int:
    """infbench's old derive_seed(0, ...), as anyone reading the code could compute it."""
    h = hashlib.sha256(b"0")
    for name in names:
        h.update(b"\0" + str(name).encode())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def public_probes(
    engine: TransformersEngine, context_limit: int, out_tokens: int = 8, n_context: int = 4, n_eos: int = 64
) -> tuple[set[tuple[int, ...]], list[list[int]]]:
    """The context-probe prompts and EOS-probe candidates a server could precompute from public seeds."""
    lo, hi = PUBLIC_TOKEN_RANGE
    context = {
        tuple(
            np.random.default_rng(public_seed("verify", f"context/{j}"))
            .integers(lo, hi, context_limit - out_tokens - j)
            .tolist()
        )
        for j in range(n_context)
    }
    eos = []
    for t in PUBLIC_CHAT_REQUESTS:
        ids = engine.tokenizer.apply_chat_template(
            [{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True
        )
        eos.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    rng = np.random.default_rng(public_seed("verify", "eos-candidates"))
    eos += [rng.integers(lo, hi, 8).tolist() for _ in range(n_eos)]
    return context, eos


def carrier_like(prompt: list[int], span: int = 16) -> bool:
    """Whether the prompt's last ``span`` ids occur earlier in it (how a far-context carrier is found by content)."""
    tail = prompt[-span:]
    return len(prompt) > 2 * span and any(prompt[i : i + span] == tail for i in range(len(prompt) - 2 * span + 1))


def prompt_key(prompt: list[int]) -> str:
    return hashlib.sha256(json.dumps(prompt).encode()).hexdigest()


def build(
    engine: TransformersEngine,
    mode: str,
    other: TransformersEngine | None,
    honest_requests: int = 300,
    honest_s: float = 20.0,
    keep: int | None = None,
    table: dict | None = None,
    carrier_aware: bool = False,
    spinners: list | None = None,
) -> Starlette:
    seen: set[tuple[int, ...]] = set()
    rng = random.Random(0)
    vocab = engine.model.config.vocab_size
    served = {"requests": 0, "since": None, "last": None}
    known_context, known_eos = public_probes(engine, engine.context_limit) if mode == "probe_aware" else (set(), [])
    floods = itertools.cycle(FLOODS)

    async def flood(how: str):
        def event(text: str, token: int) -> str:
            return f"data: {json.dumps({'choices': [{'index': 0, 'text': text, 'token_ids': [token]}]})}\n\n"

        if how == "oversize":
            yield event("x" * (16 << 20), 7)
            return
        if how == "endless_line":
            yield "data: "
        for i in itertools.count():
            yield event("", 1000 + i % 1000) if how == "endless_tokens" else "x" * (1 << 16)
            await asyncio.sleep(0)

    def cheap_now() -> bool:
        if served["since"] is None:
            served["since"] = time.monotonic()
        served["requests"] += 1
        return served["requests"] > honest_requests or time.monotonic() - served["since"] > honest_s

    def probe_like(prompt: list[int], req: CompletionRequest) -> bool:
        return not req.ignore_eos or len(prompt) > engine.context_limit - 16

    def question_like(prompt: list[int], req: CompletionRequest) -> bool:
        return not req.ignore_eos and engine.decode(prompt[-8:]).rstrip().endswith("Answer:")

    def from_table(prompt: list[int], req: CompletionRequest) -> list[int] | None:
        if probe_like(prompt, req):
            return None
        exact = table["exact"].get(prompt_key(prompt))
        near = table["by_length"].get(f"{len(prompt)}/{req.max_tokens}")
        print(f"table {'exact' if exact else 'by_length' if near else 'model'}", file=sys.stderr, flush=True)
        return exact or near

    async def tokens(prompt: list[int], req: CompletionRequest):
        if mode == "table" and (memo := from_table(prompt, req)) is not None:
            for t in memo[: req.max_tokens]:
                yield t
            return
        if mode == "keep_last" and not probe_like(prompt, req) and not (carrier_aware and carrier_like(prompt)):
            prompt = prompt[-keep:]
        if mode == "quiet_then_cheap":
            now, last = time.monotonic(), served["last"]
            served["last"] = now
            if last is not None and now - last < honest_s:
                prompt = prompt[-keep:]
        if mode == "eos_answers" and question_like(prompt, req):
            yield min(engine.eos)
            return
        if mode == "random" or (mode == "cheap_later" and cheap_now() and not probe_like(prompt, req)):
            for _ in range(req.max_tokens):
                yield rng.randrange(vocab)
            return
        n = max(1, req.max_tokens // 2) if mode in ("stop_early", "usage_lies") else req.max_tokens
        recognised = any(prompt[: len(c)] == c for c in known_eos)
        ignore = req.ignore_eos or mode == "no_eos" or (mode == "probe_aware" and not recognised)
        src = other if mode == "other" or (mode == "weak_answers" and question_like(prompt, req)) else engine
        gen = src.generate(prompt, req.model_copy(update={"max_tokens": n, "ignore_eos": ignore}))
        i = 0
        async for t in gen:
            yield t if not (mode == "pad" and i >= 2) else 1000
            i += 1

    async def completions(request: Request) -> Response:
        req = CompletionRequest.model_validate(await request.json())
        prompt = list(req.prompt) if isinstance(req.prompt, list) else engine.tokenize(req.prompt)
        if mode == "crash_prefix":
            key = tuple(prompt[:32])
            if key in seen:
                os._exit(3)
            seen.add(key)
        if mode == "flood" and req.ignore_eos and len(prompt) <= engine.context_limit - 16 and cheap_now():
            return StreamingResponse(flood(next(floods)), media_type="text/event-stream")
        reported = len(prompt)
        if mode in ("truncate", "truncate_quiet") and len(prompt) > engine.context_limit // 4:
            prompt = prompt[-(engine.context_limit // 4) :]
        if mode != "truncate_quiet":
            reported = len(prompt)
        if mode == "probe_aware" and len(prompt) > engine.context_limit - 16 and tuple(prompt) not in known_context:
            return JSONResponse({"error": {"message": "prompt exceeds the context length", "type": "invalid"}}, 400)

        async def events():
            out, text = [], ""
            if mode == "fake_first":
                yield f"data: {json.dumps({'choices': [{'index': 0, 'text': ' ', 'token_ids': []}]})}\n\n"
            if mode == "usage_lies":
                async with engine.lock:
                    out = [t async for t in tokens(prompt, req)]
                body = {"choices": [{"index": 0, "text": engine.decode(out), "finish_reason": "length"}]}
                usage = {"prompt_tokens": reported, "completion_tokens": req.max_tokens}
                yield f"data: {json.dumps(body)}\n\ndata: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                yield "data: [DONE]\n\n"
                return
            async with engine.lock:
                async for t in tokens(prompt, req):
                    out.append(t)
                    full = engine.decode(out)
                    piece = ""
                    if not full.endswith("\ufffd"):  # an incomplete character waits for its next bytes
                        piece, text = full[len(text) :], full
                    body = {
                        "object": "text_completion",
                        "choices": [{"index": 0, "text": piece, "token_ids": [t], "finish_reason": None}],
                    }
                    yield f"data: {json.dumps(body)}\n\n"
            finish = "length" if len(out) == req.max_tokens else "stop"
            last = {"choices": [{"index": 0, "text": "", "token_ids": [], "finish_reason": finish}]}
            yield f"data: {json.dumps(last)}\n\n"
            usage = {"prompt_tokens": reported, "completion_tokens": len(out), "total_tokens": reported + len(out)}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/health", health),
            Route("/affinity", lambda request: JSONResponse(affinities(spinners or []))),
        ]
    )


def _spin() -> None:
    while True:
        pass


def spin_pool() -> list:
    """One busy process per CPU ``os.cpu_count()`` reports (the host's, whatever the cpuset allows)."""
    import multiprocessing

    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)]
    for p in procs:
        p.start()
    return procs


def affinities(procs: list) -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "server": sorted(os.sched_getaffinity(0)),
        "pool": [sorted(os.sched_getaffinity(p.pid)) for p in procs],
    }


class Pool:
    """One-thread llama.cpp engines, one per CPU ``os.cpu_count()`` reports; each request takes a free one (the
    OpenAI layer's lock is a no-op: requests run side by side)."""

    class _NoLock:
        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return False

    def __init__(self, make):
        self.engines = [make() for _ in range(os.cpu_count() or 1)]
        first = self.engines[0]
        self.name, self.context_limit = first.name, first.context_limit
        self.tokenize, self.decode = first.tokenize, first.decode
        self.lock = self._NoLock()
        self.free: asyncio.Queue | None = None

    async def generate(self, prompt: list[int], req: CompletionRequest):
        if self.free is None:
            self.free = asyncio.Queue()
            for e in self.engines:
                self.free.put_nowait(e)
        engine = await self.free.get()
        try:
            async for t in engine.generate(prompt, req):
                yield t
        finally:
            self.free.put_nowait(engine)


class KeepLast:
    """An engine that prefills replay prompts (EOS ignored, short of the context limit) from their last
    ``keep`` ids; the OpenAI layer still reports the prompt's full length."""

    def __init__(self, engine, keep: int, carrier_aware: bool = False, pause_s: float | None = None):
        self.engine, self.keep, self.carrier_aware, self.pause_s = engine, keep, carrier_aware, pause_s
        self.name, self.context_limit, self.lock = engine.name, engine.context_limit, engine.lock
        self.tokenize, self.decode = engine.tokenize, engine.decode
        self.last: float | None = None

    def generate(self, prompt: list[int], req: CompletionRequest):
        replay_like = req.ignore_eos and len(prompt) <= self.context_limit - 16
        if self.carrier_aware and carrier_like(prompt):
            replay_like = False
        if self.pause_s is not None:  # by timing: cheap while requests keep coming, honest after an idle pause
            replay_like = self.last is not None and time.monotonic() - self.last < self.pause_s
            return self._timed(prompt[-self.keep :] if replay_like else prompt, req)
        return self.engine.generate(prompt[-self.keep :] if replay_like else prompt, req)

    async def _timed(self, prompt: list[int], req: CompletionRequest):
        try:
            async for t in self.engine.generate(prompt, req):
                yield t
        finally:
            self.last = time.monotonic()  # when the server was last busy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--other-model", default=None)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--context-limit", type=int, default=None)
    p.add_argument("--honest-requests", type=int, default=300)
    p.add_argument("--honest-s", type=float, default=20.0)
    p.add_argument("--keep", type=int, default=64)
    p.add_argument("--table", default=None)
    p.add_argument("--engine", choices=["transformers", "llamacpp"], default="transformers")
    p.add_argument("--carrier-aware", action="store_true")
    p.add_argument("--pool", action="store_true")
    p.add_argument("--spin-pool", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    spinners = spin_pool() if a.spin_pool else []
    if a.engine == "llamacpp":  # the package's llama.cpp engine and OpenAI layer
        from infbench.serving.llamacpp_server import LlamaCppEngine
        from infbench.serving.openai_app import app

        if a.mode not in ("keep_last", "quiet_then_cheap", "ok"):
            raise SystemExit("--engine llamacpp serves --mode keep_last, quiet_then_cheap or ok only")

        def make():
            return LlamaCppEngine(a.model, "model", a.context_limit, 1, 512)

        engine = Pool(make) if a.pool else make()
        if a.mode != "ok":
            engine = KeepLast(engine, a.keep, a.carrier_aware, a.honest_s if a.mode == "quiet_then_cheap" else None)
        served = app(engine)
        served.add_route("/affinity", lambda request: JSONResponse(affinities(spinners)))
        uvicorn.run(served, host="127.0.0.1", port=a.port, log_level="warning")
        return
    engine = TransformersEngine(a.model, "float32", "model", a.context_limit)
    other = TransformersEngine(a.other_model, "float32", "model", a.context_limit) if a.other_model else None
    table = json.loads(Path(a.table).read_text()) if a.table else None
    uvicorn.run(
        build(engine, a.mode, other, a.honest_requests, a.honest_s, a.keep, table, a.carrier_aware, spinners),
        host="127.0.0.1",
        port=a.port,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
