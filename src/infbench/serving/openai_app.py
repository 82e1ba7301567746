"""The OpenAI-compatible HTTP layer shared by the engines this package serves (S0, llama.cpp).

``POST /v1/completions`` (streaming and not): prompts as text or token ids,
``max_tokens``, ``temperature`` (0 = greedy), ``seed``, ``ignore_eos``,
``stream_options.include_usage``; every chunk carries its ``token_ids``, and the chunks' text
adds up to the ids' decoded text (a character whose bytes are split over tokens is sent with the
token that completes it; one still incomplete at the end is never sent).
Requests run one at a time under the engine's lock. ``GET /health``, ``GET /v1/models``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


class StreamOptions(BaseModel):
    include_usage: bool = False


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: str | list[int]
    max_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    seed: int | None = None
    stream: bool = False
    ignore_eos: bool = False
    stream_options: StreamOptions | None = None


class Engine(Protocol):
    name: str
    context_limit: int
    lock: asyncio.Lock

    def tokenize(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def generate(self, prompt: list[int], req: CompletionRequest) -> AsyncIterator[int]: ...


def _chunk(cid: str, name: str, text: str, ids: list[int], finish: str | None) -> str:
    body = {
        "id": cid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": name,
        "choices": [{"index": 0, "text": text, "token_ids": ids, "logprobs": None, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


def app(engine: Engine) -> Starlette:
    async def completions(request: Request) -> Response:
        try:
            req = CompletionRequest.model_validate(await request.json())
        except (ValidationError, ValueError) as exc:
            return JSONResponse({"error": {"message": str(exc)[:1000], "type": "invalid_request_error"}}, 400)
        prompt = req.prompt if isinstance(req.prompt, list) else engine.tokenize(req.prompt)
        if not prompt or len(prompt) + req.max_tokens > engine.context_limit:
            return JSONResponse(
                {
                    "error": {
                        "message": f"prompt of {len(prompt)} tokens + max_tokens "
                        f"{req.max_tokens} exceeds the context limit {engine.context_limit}",
                        "type": "invalid_request_error",
                    }
                },
                400,
            )
        cid = f"cmpl-{uuid.uuid4().hex}"

        async def run():
            out: list[int] = []
            text = ""
            async with engine.lock:
                async for token in engine.generate(prompt, req):
                    out.append(token)
                    full = engine.decode(out)
                    if full.endswith("\ufffd"):  # an incomplete UTF-8 sequence: its text waits for the next ids
                        yield "", token
                        continue
                    piece, text = full[len(text) :], full
                    yield piece, token
            finish = "length" if len(out) == req.max_tokens else "stop"
            yield finish, None

        usage = lambda n: {
            "prompt_tokens": len(prompt),
            "completion_tokens": n,  # noqa: E731
            "total_tokens": len(prompt) + n,
        }
        if not req.stream:
            ids, text = [], ""
            async for piece, token in run():
                if token is None:
                    finish = piece
                else:
                    ids.append(token)
                    text += piece
            return JSONResponse(
                {
                    "id": cid,
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": engine.name,
                    "usage": usage(len(ids)),
                    "choices": [
                        {"index": 0, "text": text, "token_ids": ids, "logprobs": None, "finish_reason": finish}
                    ],
                }
            )

        async def events():
            n = 0
            async for piece, token in run():
                if token is None:
                    yield _chunk(cid, engine.name, "", [], piece)
                else:
                    n += 1
                    yield _chunk(cid, engine.name, piece, [token], None)
            if req.stream_options and req.stream_options.include_usage:
                body: dict[str, Any] = {
                    "id": cid,
                    "object": "text_completion",
                    "model": engine.name,
                    "choices": [],
                    "usage": usage(n),
                }
                yield f"data: {json.dumps(body)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": engine.name, "object": "model"}]})

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/health", health),
            Route("/v1/models", models),
        ]
    )
