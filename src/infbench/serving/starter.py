"""S0, the starter server (PROTOCOL B1): transformers, one global request lock, no cross-request cache.

Each request builds its KV cache from scratch and holds the one lock until its
last token. The HTTP layer is :mod:`infbench.serving.openai_app`.

Run: ``python -m infbench.serving.starter --model DIR --port P [--dtype float32] [--threads N]``.
"""

from __future__ import annotations

import argparse
import asyncio
from concurrent.futures import ThreadPoolExecutor

import torch
import uvicorn

from infbench.evaluation.generation import eos_ids
from infbench.hf_loading import cache_kwargs, from_pretrained_on
from infbench.serving.openai_app import CompletionRequest, app


class TransformersEngine:
    """The model behind one lock; :meth:`generate` yields token ids one step at a time."""

    def __init__(self, model_dir: str, dtype: str, name: str, context_limit: int | None):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = from_pretrained_on(model_dir, "cpu", dtype=getattr(torch, dtype)).eval()
        self.name = name
        self.context_limit = context_limit or self.model.config.max_position_embeddings
        self.eos = set(eos_ids(self.tokenizer, self.model.generation_config))
        self.lock = asyncio.Lock()
        # One thread runs every forward pass, so a request cancelled mid-step never overlaps the next one.
        self.pool = ThreadPoolExecutor(max_workers=1)

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    @torch.inference_mode()
    def _step(self, ids: torch.Tensor, cache: dict, req: CompletionRequest, gen: torch.Generator | None):
        out = self.model(input_ids=ids, use_cache=True, **cache)
        logits = out.logits[0, -1].float()
        if req.temperature == 0:
            token = int(torch.argmax(logits))
        else:
            probs = torch.softmax(logits / req.temperature, dim=-1)
            token = int(torch.multinomial(probs, 1, generator=gen))
        return token, cache_kwargs(out)

    async def generate(self, prompt: list[int], req: CompletionRequest):
        gen = None
        if req.temperature > 0:
            gen = torch.Generator().manual_seed(req.seed if req.seed is not None else torch.seed())
        ids, cache = torch.tensor([prompt]), {}
        loop = asyncio.get_running_loop()
        for _ in range(req.max_tokens):
            token, cache = await loop.run_in_executor(self.pool, self._step, ids, cache, req, gen)
            yield token
            if token in self.eos and not req.ignore_eos:
                return
            ids = torch.tensor([[token]])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m infbench.serving.starter")
    p.add_argument("--model", required=True, help="transformers checkpoint directory")
    p.add_argument("--served-model-name", default="model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--context-limit", type=int, default=None)
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    engine = TransformersEngine(a.model, a.dtype, a.served_model_name, a.context_limit)
    uvicorn.run(app(engine), host=a.host, port=a.port, log_level="info")


if __name__ == "__main__":
    main()
