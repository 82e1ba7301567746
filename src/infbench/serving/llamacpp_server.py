"""The CPU reference engine: llama.cpp (llama-cpp-python) behind the OpenAI layer of this package.

llama-cpp-python's own server (``python -m llama_cpp.server``) accepts only text
prompts and has no ``ignore_eos`` and no streamed usage, so it cannot replay
token-id prompts with exact output lengths. This server runs the same engine
(``llama_cpp.Llama``: llama.cpp's CPU kernels, its KV cache reused for the
longest common prefix with the previous request) one request at a time, through
:mod:`infbench.serving.openai_app`. Token text comes from :class:`Pieces` (each token's whole piece),
not from ``Llama.detokenize``, which copies at most 32 bytes of a piece.

Run: ``python -m infbench.serving.llamacpp_server --model F.gguf --port P [--threads N] [--n-ctx N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
from concurrent.futures import ThreadPoolExecutor

import uvicorn

from infbench.serving.openai_app import CompletionRequest, app


class Pieces:
    """The bytes of each token as llama.cpp writes them (``llama_token_to_piece``, special tokens as no text),
    read with a buffer as large as the piece: llama-cpp-python's ``detokenize`` passes a 32-byte buffer and
    keeps nothing of a longer piece (47 SmolLM2 ids, runs of spaces, dashes or ``#``, came out empty)."""

    def __init__(self, llm):
        import llama_cpp

        self._to_piece = llama_cpp.llama_token_to_piece
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._cache: dict[int, bytes] = {}

    def piece(self, token: int) -> bytes:
        if token not in self._cache:
            size = 64
            while True:
                buf = ctypes.create_string_buffer(size)
                n = self._to_piece(self._vocab, token, buf, size, 0, False)
                if n >= 0:
                    break
                size = -n  # too small: llama.cpp returns minus the piece's length
            self._cache[token] = buf.raw[:n]
        return self._cache[token]

    def decode(self, ids: list[int]) -> str:
        return b"".join(map(self.piece, ids)).decode(errors="replace")


class LlamaCppEngine:
    def __init__(self, gguf: str, name: str, n_ctx: int, threads: int | None, n_batch: int):
        from llama_cpp import Llama

        self.llm = Llama(
            model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, n_batch=n_batch, verbose=False
        )
        self.name = name
        self.context_limit = n_ctx
        self.eos = self.llm.token_eos()
        self.pieces = Pieces(self.llm)
        self.lock = asyncio.Lock()
        # One thread runs every engine call, so a request cancelled mid-step never overlaps the next one.
        self.pool = ThreadPoolExecutor(max_workers=1)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    def decode(self, ids: list[int]) -> str:
        return self.pieces.decode(ids)

    async def generate(self, prompt: list[int], req: CompletionRequest):
        if req.seed is not None:
            self.llm.set_seed(req.seed)
        gen = self.llm.generate(
            prompt, temp=req.temperature, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True
        )
        loop = asyncio.get_running_loop()
        try:
            for _ in range(req.max_tokens):
                token = await loop.run_in_executor(self.pool, next, gen)
                yield token
                if token == self.eos and not req.ignore_eos:
                    return
        finally:
            self.pool.submit(gen.close)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m infbench.serving.llamacpp_server")
    p.add_argument("--model", required=True, help="GGUF file")
    p.add_argument("--served-model-name", default="model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--n-ctx", type=int, default=8192)
    p.add_argument("--n-batch", type=int, default=512)
    a = p.parse_args(argv)
    engine = LlamaCppEngine(a.model, a.served_model_name, a.n_ctx, a.threads, a.n_batch)
    uvicorn.run(app(engine), host=a.host, port=a.port, log_level="info")


if __name__ == "__main__":
    main()
