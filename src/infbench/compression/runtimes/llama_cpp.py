"""Runtime ``llama.cpp``: a GGUF file run unchanged through llama-cpp-python's model and context objects, behind
the package interface (:mod:`infbench.compression.package_api`).

The model is loaded once. ``score`` and each batch of ``prefill``/``step`` get their own llama.cpp context, sized
to the call (every row a sequence of one KV cache) and freed when the call or the batch ends, so a KV cache and
llama.cpp's compute buffers never outlive it: what stays resident after load and after inference is the model.
Attention is forced causal (``attention_type`` and ``llama_set_causal_attn``), whatever the GGUF's metadata says,
and a model with an encoder is refused: one-pass scoring computes what revealing tokens one at a time would.
Logits are asked for only at the positions a call needs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infbench.errors import InfbenchError

N_BATCH = 512


class NotDecoderOnly(InfbenchError):
    """A GGUF with an encoder: not a causal next-token model."""


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
        if llama_cpp.llama_model_has_encoder(self.model.model):
            raise NotDecoderOnly(f"{gguf_path.name}: the model has an encoder; a package's model must be causal")
        self.n_vocab = self.model.n_vocab()
        self._batch: _Context | None = None

    def _context(self, n_ctx: int, n_seq: int) -> _Context:
        return _Context(self._lib, self.model, self.n_vocab, n_ctx=n_ctx, n_seq=n_seq, threads=self.threads)

    def _end_batch(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None

    def score(self, ids: np.ndarray, n_last: int) -> np.ndarray:
        self._end_batch()
        ids = np.asarray(ids)
        context = self._context(int(ids.shape[1]), 1)
        try:
            rows = []
            for row in ids:
                context.clear()
                rows.append(context.decode([(0, [int(t) for t in row], 0, len(row) - n_last)]))
            return np.stack(rows)
        finally:
            context.close()

    def prefill(self, rows: list[np.ndarray], max_new_tokens: int) -> np.ndarray:
        self._end_batch()
        lengths = [len(r) for r in rows]
        self._batch = self._context(sum(lengths) + len(rows) * int(max_new_tokens), len(rows))
        self._lengths = lengths
        out = self._batch.decode([(i, [int(t) for t in row], 0, len(row) - 1) for i, row in enumerate(rows)])
        return out

    def step(self, tokens: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if self._batch is None:
            raise RuntimeError("step before prefill")
        calls = []
        for token, row in zip(np.asarray(tokens).tolist(), np.asarray(rows).tolist()):
            calls.append((row, [int(token)], self._lengths[row], self._lengths[row]))
            self._lengths[row] += 1
        return self._batch.decode(calls)

    def release(self) -> None:
        self._end_batch()

    def native_resident_bytes(self) -> int:
        return int(self._lib.llama_model_size(self.model.model))


class _Context:
    """A llama.cpp context of ``n_seq`` sequences sharing ``n_ctx`` cells of KV cache, and its token batch."""

    def __init__(self, lib, model, n_vocab: int, *, n_ctx: int, n_seq: int, threads: int):
        from llama_cpp._internals import LlamaBatch, LlamaContext

        self._lib, self.n_vocab = lib, n_vocab
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = min(N_BATCH, n_ctx)
        params.n_seq_max = n_seq
        params.kv_unified = True  # rows of any lengths share the cells
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        params.attention_type = lib.LLAMA_ATTENTION_TYPE_CAUSAL
        # llama.cpp's default "auto" turns flash attention on, which on the CPU moved SmolLM2 Q4_0 logits by up
        # to 38 on random-token rows; off, as llama_cpp.Llama runs it (logits equal to that class's, tested)
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = LlamaContext(model=model, params=params, verbose=False)
        lib.llama_set_causal_attn(self.ctx.ctx, True)
        self.batch = LlamaBatch(n_tokens=params.n_batch, embd=0, n_seq_max=1, verbose=False)

    def close(self) -> None:
        self.batch.close()
        self.ctx.close()

    def clear(self) -> None:
        self.ctx.kv_cache_clear()

    def decode(self, calls: list[tuple[int, list[int], int, int]]) -> np.ndarray:
        """Feed each call's ``(sequence, tokens, first position, want_from)``: its tokens at positions
        ``first...`` of its sequence. The float32 logits of every position ``>= want_from``, calls in order."""
        items = [
            (seq, token, pos + i, pos + i >= want) for seq, tokens, pos, want in calls for i, token in enumerate(tokens)
        ]
        out = []
        size = self.batch._n_tokens
        for start in range(0, len(items), size):
            chunk = items[start : start + size]
            b = self.batch.batch
            b.n_tokens = len(chunk)
            wanted = []
            for i, (seq, token, pos, logits) in enumerate(chunk):
                b.token[i], b.pos[i], b.n_seq_id[i] = token, pos, 1
                b.seq_id[i][0] = seq
                b.logits[i] = logits
                if logits:
                    wanted.append(i)
            self.ctx.decode(self.batch)
            for i in wanted:
                ptr = self._lib.llama_get_logits_ith(self.ctx.ctx, i)
                out.append(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy())
        return np.stack(out) if out else np.zeros((0, self.n_vocab), np.float32)
