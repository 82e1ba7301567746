"""Runtime ``llama.cpp``: a GGUF file run unchanged through llama-cpp-python."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np


class LlamaCppRunner:
    def __init__(self, gguf_path: Path, threads: int, n_ctx: int = 4096):
        from llama_cpp import Llama

        self.llm = Llama(model_path=str(gguf_path), n_ctx=n_ctx, n_batch=512, logits_all=True,
                         n_threads=threads, n_threads_batch=threads, verbose=False)

    def logits(self, input_ids: np.ndarray, n_last: int) -> np.ndarray:
        out = []
        for row in input_ids:
            self.llm.reset()
            self.llm.eval([int(t) for t in row])
            out.append(np.array(self.llm.scores[len(row) - n_last:len(row)], dtype=np.float32))
        return np.stack(out)

    def generate(self, input_ids: list[int], max_new_tokens: int) -> Iterator[int]:
        self.llm.reset()
        self.llm.eval([int(t) for t in input_ids])
        for step in range(max_new_tokens):
            token = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
            yield token
            if step + 1 < max_new_tokens:
                self.llm.eval([token])

    def release(self) -> None:
        self.llm.reset()

    def workspace(self) -> list:
        """The logits buffer (n_ctx x vocab float32), scratch space like a KV cache."""
        return [self.llm.scores, self.llm.input_ids]

    def native_resident_bytes(self) -> int:
        import llama_cpp

        return int(llama_cpp.llama_model_size(self.llm.model))
