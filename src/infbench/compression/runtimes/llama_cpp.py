"""Runtime ``llama.cpp``: a GGUF file run unchanged through llama-cpp-python's model and context objects.

The model (the GGUF, memory-mapped) is loaded once. Every call gets its own llama.cpp context, sized to the call
and freed when the call ends, so a KV cache and llama.cpp's compute buffers never outlive a call: what stays
resident after load and after inference is the model. Logits are asked for only at the positions a call needs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

N_BATCH = 512


class LlamaCppRunner:
    def __init__(self, gguf_path: Path, threads: int):
        import llama_cpp
        from llama_cpp._internals import LlamaModel
        from llama_cpp._logger import set_verbose

        set_verbose(False)

        self._lib = llama_cpp
        self.threads = threads
        params = llama_cpp.llama_model_default_params()
        # read into llama.cpp's own buffers, not memory-mapped: the CPU backend repacks most weight matrices
        # into an interleaved copy, and with a mapping the file's pages stayed resident beside that copy (S_res
        # 158 MB for an 85 MB Q4_0 model, measured from outside)
        params.load_mode = llama_cpp.LLAMA_LOAD_MODE_NONE
        self.model = LlamaModel(path_model=str(gguf_path), params=params, verbose=False)
        self.n_vocab = self.model.n_vocab()

    @contextlib.contextmanager
    def _context(self, n_tokens: int):
        from llama_cpp._internals import LlamaBatch, LlamaContext

        params = self._lib.llama_context_default_params()
        params.n_ctx = n_tokens
        params.n_batch = params.n_ubatch = min(N_BATCH, n_tokens)
        params.n_threads = params.n_threads_batch = self.threads
        params.no_perf = True
        # llama.cpp's default "auto" turns flash attention on, which on the CPU moved SmolLM2 Q4_0 logits by up
        # to 38 on random-token rows; off, as llama_cpp.Llama runs it (logits equal to that class's, tested)
        params.flash_attn_type = self._lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        ctx = LlamaContext(model=self.model, params=params, verbose=False)
        batch = LlamaBatch(n_tokens=params.n_batch, embd=0, n_seq_max=1, verbose=False)
        try:
            yield ctx, batch
        finally:
            batch.close()
            ctx.close()

    def _decode(self, ctx, batch, tokens: list[int], n_past: int, want_from: int) -> np.ndarray:
        """Feed ``tokens`` at positions ``n_past...``; the logits of positions ``>= want_from`` (float32)."""
        out = []
        for start in range(0, len(tokens), batch._n_tokens):
            chunk = tokens[start : start + batch._n_tokens]
            b = batch.batch
            b.n_tokens = len(chunk)
            wanted = []
            for i, token in enumerate(chunk):
                pos = n_past + start + i
                b.token[i], b.pos[i], b.n_seq_id[i] = token, pos, 1
                b.seq_id[i][0] = 0
                b.logits[i] = pos >= want_from
                if pos >= want_from:
                    wanted.append(i)
            ctx.decode(batch)
            for i in wanted:
                ptr = self._lib.llama_get_logits_ith(ctx.ctx, i)
                out.append(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy())
        return np.stack(out) if out else np.zeros((0, self.n_vocab), np.float32)

    def logits(self, input_ids: np.ndarray, n_last: int) -> np.ndarray:
        rows = []
        with self._context(int(input_ids.shape[1])) as (ctx, batch):
            for row in input_ids:
                ctx.kv_cache_clear()
                tokens = [int(t) for t in row]
                rows.append(self._decode(ctx, batch, tokens, 0, len(tokens) - n_last))
        return np.stack(rows)

    def generate(self, input_ids: list[int], max_new_tokens: int) -> Iterator[int]:
        prompt = [int(t) for t in input_ids]
        with self._context(len(prompt) + max_new_tokens) as (ctx, batch):
            last = self._decode(ctx, batch, prompt, 0, len(prompt) - 1)[-1]
            for step in range(max_new_tokens):
                token = int(np.argmax(last))
                yield token
                if step + 1 < max_new_tokens:
                    last = self._decode(ctx, batch, [token], len(prompt) + step, 0)[-1]

    def release(self) -> None:
        """Nothing to drop: every call's context is freed when the call ends."""

    def native_resident_bytes(self) -> int:
        return int(self._lib.llama_model_size(self.model.model))
