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
- ``ok``: honest.

Run: ``python adversarial_server.py --model DIR --port P --mode M [--context-limit N] [--other-model DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random

import torch
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from infbench.serving.openai_app import CompletionRequest
from infbench.serving.starter import TransformersEngine

MODES = ("ok", "truncate", "truncate_quiet", "stop_early", "pad", "random", "other", "crash_prefix", "no_eos")


def build(engine: TransformersEngine, mode: str, other: TransformersEngine | None) -> Starlette:
    seen: set[tuple[int, ...]] = set()
    rng = random.Random(0)
    vocab = engine.model.config.vocab_size

    async def tokens(prompt: list[int], req: CompletionRequest):
        if mode == "random":
            for _ in range(req.max_tokens):
                yield rng.randrange(vocab)
            return
        n = max(1, req.max_tokens // 2) if mode == "stop_early" else req.max_tokens
        ignore = req.ignore_eos or mode == "no_eos"
        src = other if mode == "other" else engine
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
        reported = len(prompt)
        if mode in ("truncate", "truncate_quiet") and len(prompt) > engine.context_limit // 4:
            prompt = prompt[-(engine.context_limit // 4):]
        if mode != "truncate_quiet":
            reported = len(prompt)

        async def events():
            out, text = [], ""
            async with engine.lock:
                async for t in tokens(prompt, req):
                    out.append(t)
                    full = engine.decode(out)
                    piece, text = full[len(text):], full
                    body = {"object": "text_completion", "choices": [
                        {"index": 0, "text": piece, "token_ids": [t], "finish_reason": None}]}
                    yield f"data: {json.dumps(body)}\n\n"
            finish = "length" if len(out) == req.max_tokens else "stop"
            yield f"data: {json.dumps({'choices': [{'index': 0, 'text': '', 'token_ids': [], 'finish_reason': finish}]})}\n\n"
            usage = {"prompt_tokens": reported, "completion_tokens": len(out), "total_tokens": reported + len(out)}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]), Route("/health", health)])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--other-model", default=None)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--context-limit", type=int, default=None)
    a = p.parse_args()
    torch.set_num_threads(1)
    engine = TransformersEngine(a.model, "float32", "model", a.context_limit)
    other = TransformersEngine(a.other_model, "float32", "model", a.context_limit) if a.other_model else None
    uvicorn.run(build(engine, a.mode, other), host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
