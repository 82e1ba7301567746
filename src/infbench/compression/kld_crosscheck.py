"""The divergence diagnostics (:mod:`infbench.compression.divergence`) against llama.cpp's own
``llama-perplexity --kl-divergence`` on the same model and tokens.

llama-perplexity tokenizes a text file, cuts it into chunks of ``n_ctx`` tokens (the first of each replaced by
BOS where the model adds one) and scores the second half of each chunk: with ``--kl-divergence-base`` the base
model's log-probs of every token of the vocabulary at those positions go to a file (uint16 over the 16 nats
below the top token, the tokens under -16 nats dropped), with ``--kl-divergence`` a candidate is compared
with them. Here the same chunks (read from that file) run through both GGUF files in llama-cpp-python, and the
pipeline's statistics are computed from the two sets of raw logits: once with the base kept as its top ``k``
tokens plus the rest (what verification stores, ``likelihood.reference_top_k``), once with the whole
vocabulary (the exact values both approximations aim at).

``python -m infbench.compression.kld_crosscheck BASE.gguf CANDIDATE.gguf TEXT --out report.md``; needs the
tools of :mod:`infbench.llama_tools`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from infbench import atomic, llama_tools
from infbench.compression import divergence
from infbench.compression.likelihood_files import TopLogProbs
from infbench.compression.records import DivergenceSummary
from infbench.compression.scoring import target_log_probs

_STAT = re.compile(r"^\s*(Mean|Maximum|Minimum|Median|[0-9.]+%)\s+(KLD|Δp)\s*:\s*(-?[0-9.]+)", re.MULTILINE)
_SAME_TOP = re.compile(r"Same top p\s*:\s*([0-9.]+)")
_RMS = re.compile(r"RMS Δp\s*:\s*([0-9.]+)")


def llama_statistics(output: str) -> dict[str, float]:
    """llama-perplexity's KL divergence and token probability statistics (``kld_mean``, ``kld_p99``,
    ``dp_p1``, ``same_top_p``, ...), Δp and top-p as fractions."""
    names = {"Mean": "mean", "Maximum": "max", "Minimum": "min", "Median": "p50"}
    stats = {}
    for name, quantity, value in _STAT.findall(output):
        key = names.get(name) or f"p{float(name[:-1]):g}"
        stats[f"{'kld' if quantity == 'KLD' else 'dp'}_{key}"] = float(value) * (0.01 if quantity == "Δp" else 1.0)
    if m := _SAME_TOP.search(output):
        stats["same_top_p"] = float(m[1]) / 100
    if m := _RMS.search(output):
        stats["dp_rms"] = float(m[1]) / 100
    return stats


def read_base_tokens(path: str | Path) -> tuple[int, int, np.ndarray]:
    """``n_ctx``, ``n_vocab`` and the chunks' tokens ``[n_chunk, n_ctx]`` of a ``--kl-divergence-base`` file."""
    with open(path, "rb") as f:
        if f.read(8) != b"_logits_":
            raise ValueError(f"{path}: not a llama-perplexity logits file")
        n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(f.read(12), dtype=np.int32))
        tokens = np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype=np.int32).reshape(n_chunk, n_ctx)
    return n_ctx, n_vocab, tokens


def _logits(gguf_file: str | Path, chunks: np.ndarray, first: int, threads: int) -> np.ndarray:
    """Raw logits ``[n_chunk, n_ctx - 1 - first, V]`` of the scored positions of each chunk (BOS first where
    the model adds one, as llama-perplexity does)."""
    import llama_cpp

    n_ctx = chunks.shape[1]
    llm = llama_cpp.Llama(
        str(gguf_file), n_ctx=n_ctx, n_batch=n_ctx, logits_all=True, flash_attn=False, verbose=False, n_threads=threads
    )
    bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
    out = []
    for chunk in chunks:
        ids = [int(t) for t in chunk]
        if bos:
            ids[0] = llm.token_bos()
        llm.reset()
        llm.eval(ids)
        out.append(np.array(llm.scores[first : n_ctx - 1], dtype=np.float32))
    llm.close()
    return np.stack(out)


def _exact(base: torch.Tensor, candidate: torch.Tensor, chunk_rows: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Per position: ``KL(p || q)`` over the whole vocabulary (float64) and whether the top tokens agree."""
    b, c = base.reshape(-1, base.shape[-1]), candidate.reshape(-1, candidate.shape[-1])
    kl, same = np.empty(b.shape[0]), np.empty(b.shape[0], dtype=bool)
    for start in range(0, b.shape[0], chunk_rows):
        rows = slice(start, start + chunk_rows)
        lp, lq = torch.log_softmax(b[rows].double(), -1), torch.log_softmax(c[rows].double(), -1)
        kl[rows] = (lp.exp() * (lp - lq)).sum(-1).numpy()
        same[rows] = (b[rows].argmax(-1) == c[rows].argmax(-1)).numpy()
    return kl.reshape(base.shape[:-1]), same.reshape(base.shape[:-1])


def pipeline_statistics(
    base: np.ndarray, candidate: np.ndarray, targets: np.ndarray, top_k: int
) -> tuple[DivergenceSummary, DivergenceSummary]:
    """The pipeline's statistics with the base as its top ``top_k`` (plus the rest), as verification computes
    them, and over the whole vocabulary; ``base``, ``candidate`` ``[chunks, positions, V]`` raw logits,
    ``targets`` the next tokens."""
    b, c = torch.from_numpy(base), torch.from_numpy(candidate)
    t = torch.from_numpy(targets.astype(np.int64))
    lp, lq = target_log_probs(b, t).numpy(), target_log_probs(c, t).numpy()
    values, ids = divergence.top_log_probs(b, top_k)
    accumulated = divergence.Accumulator(TopLogProbs(ids.numpy().astype(np.int32), values.numpy()))
    accumulated(np.arange(base.shape[0]), c)
    top = accumulated.summary(lp, lq, n_resamples=1000, seed=0)
    kl, same = _exact(b, c)
    full = divergence.summarize(
        kl, same, divergence.delta_p(lp, lq), top_k=base.shape[-1], p_rest_mean=0.0, n_resamples=1000, seed=0
    )
    return top, full


def run(base_gguf: str, candidate_gguf: str, text: str, *, n_ctx: int, chunks: int, top_k: int, threads: int) -> str:
    """The comparison as Markdown."""
    perplexity = llama_tools.tool("llama-perplexity")
    with tempfile.TemporaryDirectory(prefix="kld-") as tmp:
        logits_file = Path(tmp) / "base.kld"
        # one chunk per batch and no flash attention (llama-perplexity's default "auto" turns it on for the
        # CPU), as llama-cpp-python evaluates the chunks below: with it on, the logits differ enough to move
        # the mean KLD by 1.3% and the maximum by 8% on SmolLM2 (docs/compression.md)
        common = ["-c", str(n_ctx), "--chunks", str(chunks), "-t", str(threads), "-b", str(n_ctx), "-fa", "off"]
        start = time.monotonic()
        subprocess.run(
            [str(perplexity), "-m", base_gguf, "-f", text, "--kl-divergence-base", str(logits_file), *common],
            check=True,
            capture_output=True,
        )
        done = subprocess.run(
            [str(perplexity), "-m", candidate_gguf, "--kl-divergence-base", str(logits_file), "--kl-divergence"]
            + common,
            check=True,
            capture_output=True,
            text=True,
        )
        llama_s = time.monotonic() - start
        theirs = llama_statistics(done.stdout + done.stderr)
        n_ctx, _, tokens = read_base_tokens(logits_file)
    first = n_ctx // 2
    start = time.monotonic()
    base = _logits(base_gguf, tokens, first, threads)
    candidate = _logits(candidate_gguf, tokens, first, threads)
    top, full = pipeline_statistics(base, candidate, tokens[:, first + 1 :], top_k)
    ours_s = time.monotonic() - start
    rows = [
        ("KLD mean", "kld_mean", top.kld_mean, full.kld_mean),
        ("KLD median", "kld_p50", top.kld_percentiles["p50"], full.kld_percentiles["p50"]),
        ("KLD p99", "kld_p99", top.kld_percentiles["p99"], full.kld_percentiles["p99"]),
        ("KLD p99.9", "kld_p99.9", top.kld_percentiles["p99.9"], full.kld_percentiles["p99.9"]),
        ("KLD max", "kld_max", top.kld_max, full.kld_max),
        ("same top p", "same_top_p", top.same_top_p, full.same_top_p),
        ("Δp RMS", "dp_rms", top.dp_rms, full.dp_rms),
        ("Δp p1", "dp_p1", top.dp_percentiles["p1"], full.dp_percentiles["p1"]),
        ("Δp median", "dp_p50", top.dp_percentiles["p50"], full.dp_percentiles["p50"]),
        ("Δp p99", "dp_p99", top.dp_percentiles["p99"], full.dp_percentiles["p99"]),
    ]
    lines = [
        f"base `{Path(base_gguf).name}`, candidate `{Path(candidate_gguf).name}`: {tokens.shape[0]} chunks of "
        f"{n_ctx} tokens, {top.tokens} scored positions (the second half of each chunk); llama-perplexity "
        f"{llama_s:.1f} s (both calls), the pipeline's statistics from llama-cpp-python's logits {ours_s:.1f} s",
        "",
        f"| statistic | llama-perplexity | pipeline, top {top_k} + rest | pipeline, whole vocabulary |",
        "|---|---|---|---|",
    ]
    for label, key, a, b in rows:
        lines.append(f"| {label} | {theirs.get(key, float('nan')):.6g} | {a:.6g} | {b:.6g} |")
    lines += ["", f"source mass outside the top {top_k}: {top.p_rest_mean:.3g} (mean per position)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infbench.compression.kld_crosscheck", description=__doc__)
    parser.add_argument("base")
    parser.add_argument("candidate")
    parser.add_argument("text", help="a text file, as llama-perplexity -f reads it")
    parser.add_argument("--ctx", type=int, default=256)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    report = run(
        args.base,
        args.candidate,
        args.text,
        n_ctx=args.ctx,
        chunks=args.chunks,
        top_k=args.top_k,
        threads=args.threads,
    )
    if args.out:
        atomic.write_text(args.out, report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
