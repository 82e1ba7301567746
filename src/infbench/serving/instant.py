"""A real OpenAI-compatible streaming server that needs no model: for tests and the client benchmark.

It streams ``max_tokens`` token ids (``seconds_per_token`` apart; 0 = instantly, all events in one write)
with usage, and stamps its own receive and first-token times (``time.perf_counter``,
CLOCK_MONOTONIC, comparable with the client's on one machine) in the first chunk.
``POST /v1/chat/completions`` streams the same as chat chunks (``delta.content``, no token ids); its
``usage.prompt_tokens`` counts the words of the messages. ``GET /v1/models`` names ``instant``.
``GET /debug/requests`` lists what it received (prompt, max_tokens, receive time, the client's port).
``mode`` makes it misbehave on purpose: ``die`` (exits after ``after`` requests),
``hang`` (never answers after ``after`` requests), ``malformed`` (broken SSE),
``short`` (one token fewer than asked), ``bad_usage`` (usage disagrees with the stream), ``hold``
(paced by ``seconds_per_token`` but every event sent at the end: a burst after a hold), and what
the verifier's own limits must bound (:mod:`infbench.serving.sse`): ``endless_line`` (an SSE line that
never ends, streamed as fast as the client reads), ``trickle`` (the same, a byte every 0.2 s),
``oversize`` (one 16 MiB chunk of text), ``endless_tokens`` (token chunks past ``max_tokens``,
forever), ``endless_health`` (``GET /health`` answers 200 with a body that never ends).
``context_limit`` refuses (HTTP 400, as vLLM words it) a prompt plus ``max_tokens`` longer than it.

Run: ``python -m infbench.serving.instant --port P [--mode M] [--seconds-per-token S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODES = (
    "ok",
    "die",
    "hang",
    "malformed",
    "short",
    "bad_usage",
    "hold",
    "endless_line",
    "trickle",
    "oversize",
    "endless_tokens",
    "endless_health",
)
FLOOD = b"x" * (1 << 16)


def app(mode: str = "ok", seconds_per_token: float = 0.0, after: int = 0, context_limit: int = 0) -> Starlette:
    received: list[dict] = []

    async def completions(request: Request) -> Response:
        return await stream(request, chat=False)

    async def chat_completions(request: Request) -> Response:
        return await stream(request, chat=True)

    def choice(i: int, chat: bool) -> dict:
        if chat:
            return {"index": 0, "delta": {"content": f" t{i}"}, "finish_reason": None}
        return {"index": 0, "text": f" t{i}", "token_ids": [i % 1000], "finish_reason": None}

    async def stream(request: Request, chat: bool) -> Response:
        t_recv = time.perf_counter()
        body = await request.json()
        prompt = " ".join(m["content"] for m in body["messages"]).split() if chat else body["prompt"]
        n = int(body["max_tokens"])
        received.append(
            {
                "prompt": prompt,
                "max_tokens": n,
                "receive_time": t_recv,
                "client_port": request.client.port if request.client else None,
            }
        )
        late = len(received) > after
        if context_limit and len(prompt) + n > context_limit:
            return JSONResponse(
                {
                    "error": {
                        "message": f"This model's maximum context length is {context_limit} tokens. "
                        f"However, you requested {len(prompt) + n} tokens.",
                        "type": "invalid_request_error",
                    }
                },
                400,
            )
        if mode == "die" and late:
            os._exit(1)
        if mode == "hang" and late:
            await asyncio.sleep(3600)
        if mode in ("endless_line", "trickle", "oversize", "endless_tokens") and late:
            return StreamingResponse(flood(mode), media_type="text/event-stream")

        async def events():
            n_send = n - 1 if mode == "short" and late else n
            for i in range(n_send):
                if seconds_per_token and i:
                    await asyncio.sleep(seconds_per_token)
                chunk = {"object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice(i, chat)]}
                if i == 0:
                    chunk["server_receive_time"] = t_recv
                    chunk["server_first_token_time"] = time.perf_counter()
                if mode == "malformed" and late and i == 1:
                    yield "data: {not json\n\n"
                    continue
                yield f"data: {json.dumps(chunk)}\n\n"
            reported = n_send + 1 if mode == "bad_usage" and late else n_send
            usage = {
                "prompt_tokens": len(prompt),
                "completion_tokens": reported,
                "total_tokens": len(prompt) + reported,
            }
            yield f"data: {json.dumps({'object': 'text_completion', 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        async def together():  # streaming instantly: every event in one write
            yield "".join([e async for e in events()])

        body = events() if seconds_per_token and mode != "hold" else together()
        return StreamingResponse(body, media_type="text/event-stream")

    async def flood(how: str):
        if how == "oversize":
            huge = {"choices": [{"index": 0, "text": "x" * (16 << 20), "token_ids": [7]}]}
            yield f"data: {json.dumps(huge)}\n\n"
            return
        if how != "endless_tokens":
            yield b"data: "
        for i in itertools.count():
            if how == "endless_tokens":
                yield f"data: {json.dumps({'choices': [choice(i, False)]})}\n\n"
            else:
                yield FLOOD[:1] if how == "trickle" else FLOOD
            await asyncio.sleep(0.2 if how == "trickle" else 0)

    async def health(request: Request) -> Response:
        if mode == "endless_health":
            return StreamingResponse(flood("endless_line"))
        return JSONResponse({"ok": True})

    async def debug(request: Request) -> Response:
        return JSONResponse(received)

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "instant", "object": "model"}]})

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
            Route("/debug/requests", debug),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m infbench.serving.instant")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=MODES, default="ok")
    p.add_argument("--after", type=int, default=0, help="misbehave only after this many requests")
    p.add_argument("--seconds-per-token", type=float, default=0.0)
    p.add_argument("--context-limit", type=int, default=0, help="refuse longer prompt + max_tokens (0: no limit)")
    a = p.parse_args(argv)
    uvicorn.run(
        app(a.mode, a.seconds_per_token, a.after, a.context_limit),
        host=a.host,
        port=a.port,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=60,
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
