"""Runtime ``llama.cpp``: a GGUF file run unchanged through llama-cpp-python's model and context objects, behind
the package interface (:mod:`infbench.compression.package_api`).

The model is loaded once. Each batch of ``prefill``/``step`` gets its own llama.cpp context, sized to the batch
(every row a sequence of one KV cache) and freed when the batch ends; ``score`` keeps one context across calls
until the next batch or ``release``. So a KV cache and llama.cpp's compute buffers never outlive the work they
serve: what stays resident after load and after inference is the model.

Work on a prefix already in the cache is not done twice: the rows of a batch that begin alike (the few-shot
examples of the accuracy gate's prompts) have their shared prefix computed once and shared by every row's
sequence, and a scored row that begins as the previous scored row did computes from where the two part.
Attention is forced causal (``attention_type`` and ``llama_set_causal_attn``), whatever the GGUF's metadata says,
and a model with an encoder is refused: one-pass scoring computes what revealing tokens one at a time would.
Logits are asked for only at the positions a call needs, always positions the call itself computes.
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
        self._scoring: _Scoring | None = None

    def _context(self, n_ctx: int, n_seq: int) -> _Context:
        return _Context(self._lib, self.model, self.n_vocab, n_ctx=n_ctx, n_seq=n_seq, threads=self.threads)

    def _end_batch(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None

    def _end_scoring(self) -> None:
        if self._scoring is not None:
            self._scoring.context.close()
            self._scoring = None

    def score(self, ids: np.ndarray, n_last: int) -> np.ndarray:
        self._end_batch()
        ids = np.asarray(ids)
        if self._scoring is None or self._scoring.context.ctx.n_ctx() < ids.shape[1]:
            self._end_scoring()
            self._scoring = _Scoring(self._context(-(-int(ids.shape[1]) // N_BATCH) * N_BATCH, 1))
        return np.stack([self._scoring.logits([int(t) for t in row], n_last) for row in ids])

    def prefill(self, rows: list[np.ndarray], max_new_tokens: int) -> np.ndarray:
        self._end_batch()
        self._end_scoring()
        rows = [[int(t) for t in row] for row in rows]
        lengths = [len(r) for r in rows]
        shared = min(_common_prefix(rows), min(lengths) - 1) if len(rows) > 1 else 0
        cells = shared + sum(n - shared for n in lengths) + len(rows) * int(max_new_tokens)
        self._batch = self._context(cells, len(rows))
        self._lengths = lengths
        if shared > 0:
            self._batch.decode([(0, rows[0][:shared], 0, shared)])
            for seq in range(1, len(rows)):
                self._batch.ctx.kv_cache_seq_cp(0, seq, 0, shared)
        return self._batch.decode([(i, row[shared:], shared, len(row) - 1) for i, row in enumerate(rows)])

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
        self._end_scoring()

    def native_resident_bytes(self) -> int:
        return int(self._lib.llama_model_size(self.model.model))


def _common_prefix(rows: list[list[int]]) -> int:
    """How many leading tokens every row of ``rows`` has in common."""
    first = rows[0]
    n = min(len(r) for r in rows)
    for row in rows[1:]:
        n = next((i for i, (a, b) in enumerate(zip(first[:n], row[:n])) if a != b), n)
    return n


class _Scoring:
    """A context of one sequence that ``score`` keeps between calls, and the tokens its cache holds."""

    def __init__(self, context: _Context):
        self.context, self.cached = context, []

    def logits(self, row: list[int], n_last: int) -> np.ndarray:
        """The logits of the last ``n_last`` positions of ``row``, computed from where ``row`` parts from the
        cached tokens (never later than its first scored position)."""
        want_from = len(row) - n_last
        keep = min(_common_prefix([self.cached, row]), want_from)
        self.context.ctx.kv_cache_seq_rm(0, keep, -1)
        self.cached = []
        out = self.context.decode([(0, row[keep:], keep, want_from)])
        self.cached = row
        return out


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
