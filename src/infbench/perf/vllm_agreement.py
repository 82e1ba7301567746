"""vLLM against transformers on one checkpoint: the teacher-forced log-probs of the same rows through the ``vllm``
runtime (:mod:`infbench.compression.runtimes.vllm`, run by the vLLM environment's interpreter,
:func:`infbench.vllm_env.vllm_python`) and through the ``hf`` runtime, per dtype: the largest and mean absolute
difference of the log-probs of the rows' own tokens, and how often the two argmaxes agree. Every log-prob is
computed here from each engine's raw logits (float32 log-softmax), as the pipeline computes them.

``infbench bench-vllm-agreement``; ``python -m infbench.perf.vllm_agreement --vllm-side ...`` is the vLLM half.
``infbench bench-vllm-likelihood`` (:func:`likelihood`): the likelihood stage's two backends on one set.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from pydantic import BaseModel


def rows_of(contexts_parquet: str | None, n_rows: int, length: int, seed: int = 0) -> np.ndarray:
    """``n_rows`` rows of ``length`` tokens: the first of a contexts file (real text), else random tokens."""
    if contexts_parquet:
        import pandas as pd

        table = pd.read_parquet(contexts_parquet)
        ids = np.stack([np.asarray(r, dtype=np.int64) for r in table["token_ids"][:n_rows]])
        return ids[:, :length]
    return np.random.default_rng(seed).integers(100, 40000, size=(n_rows, length), dtype=np.int64)


def _logprobs(logits, ids: np.ndarray, n_last: int) -> tuple[np.ndarray, np.ndarray]:
    """Log-probs of each row's next tokens over its last ``n_last - 1`` scored positions, and every argmax."""
    import torch

    lp = torch.log_softmax(torch.as_tensor(logits).float(), -1)[:, :-1]
    targets = torch.as_tensor(ids[:, -(n_last - 1) :])
    return lp.gather(-1, targets.unsqueeze(-1)).squeeze(-1).numpy(), lp.argmax(-1).numpy()


def vllm_side(checkpoint: str, ids_file: str, n_last: int, dtype: str, kv_cache_mib: int, out: str) -> None:
    from infbench.compression.runtimes.vllm import VllmRunner

    ids = np.load(ids_file)
    runner = VllmRunner(Path(checkpoint), "cpu", kv_cache_mib=kv_cache_mib, dtype=dtype)
    chosen, argmax = _logprobs(runner.score(ids, n_last), ids, n_last)
    np.savez(out, chosen=chosen, argmax=argmax)


def run(
    checkpoint: str,
    *,
    dtypes: list[str],
    contexts: str | None,
    rows: int,
    length: int,
    n_last: int,
    kv_cache_mib: int,
    python: str | None = None,
    out: str | None = None,
) -> str:
    """The table (Markdown)."""
    import torch

    from infbench.compression.runtimes.hf import HFRunner
    from infbench.vllm_env import vllm_python

    ids = rows_of(contexts, rows, length)
    lines = [
        "| dtype | positions | max abs diff of log-probs | mean abs diff | argmax agreement |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="infbench-vllm-agreement-") as tmp:
        np.save(f"{tmp}/ids.npy", ids)
        for dtype in dtypes:
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
            cmd = [str(python or vllm_python()), "-m", "infbench.perf.vllm_agreement", "--vllm-side"]
            cmd += [checkpoint, f"{tmp}/ids.npy", str(n_last), dtype, str(kv_cache_mib), f"{tmp}/{dtype}.npz"]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"the vLLM side failed ({done.returncode}): {done.stderr[-3000:]}")
            theirs = np.load(f"{tmp}/{dtype}.npz")
            with torch.inference_mode():
                ours, argmax = _logprobs(HFRunner(Path(checkpoint), "cpu", dtype=dtype).score(ids, n_last), ids, n_last)
            diff = np.abs(ours - theirs["chosen"])
            agree = float(np.mean(argmax == theirs["argmax"]))
            lines.append(f"| {dtype} | {diff.size} | {diff.max():.3g} | {diff.mean():.3g} | {agree:.4f} |")
    table = "\n".join(lines)
    if out:
        Path(out).write_text(table + "\n")
    return table


class BackendRun(BaseModel):
    """One backend's pass over a set: the likelihood stage's own records and its times."""

    backend: str
    device: str
    ppl: float
    f_self: float
    sample_s: float
    score_s: float


class LikelihoodAgreement(BaseModel):
    """``likelihood.backend`` vllm against transformers on one set: both sample from the same per-context
    uniforms, so their draws are the same until the logits differ enough to move one token."""

    rows: int
    tokens: int
    runs: list[BackendRun]
    same_tokens: float  # share of continuation positions with the same token
    same_rows: int  # rows whose whole continuation is the same
    shared_positions: int  # positions before each row's first differing token
    max_abs_logprob_diff: float  # of the sampler's log-probs at those positions
    mean_abs_logprob_diff: float
    top1_agreement: float  # of the scorers' most probable tokens at those positions
    cross_f: float  # F of vLLM's scores against transformers' on transformers' continuations

    def table(self) -> str:
        lines = [
            "| backend | device | PPL | F_self | sample s | score s |",
            "|---|---|---|---|---|---|",
            *(
                f"| {r.backend} | {r.device} | {r.ppl:.4f} | {r.f_self:.5f} | {r.sample_s:.0f} | {r.score_s:.0f} |"
                for r in self.runs
            ),
            "",
            f"{self.rows} rows x {self.tokens} tokens: {self.same_tokens:.1%} of the tokens and {self.same_rows} "
            f"rows the same; before each row's first difference ({self.shared_positions} positions) the sampler's "
            f"log-probs differ by at most {self.max_abs_logprob_diff:.3g} (mean {self.mean_abs_logprob_diff:.3g}) "
            f"and the scorers' most probable tokens agree at {self.top1_agreement:.2%}; scored by both on "
            f"transformers' continuations, vLLM's F = PPL(transformers) / PPL(vLLM) = {self.cross_f:.5f}",
        ]
        return "\n".join(lines)


def likelihood(
    checkpoint: str,
    contexts_parquet: str,
    *,
    set_name: str,
    n_tokens: int,
    dtype: str,
    batch_size: int,
    kv_cache_mib: int,
    top_k: int = 16,
) -> LikelihoodAgreement:
    """The likelihood stage (:mod:`infbench.compression.likelihood`: sampling, then scoring) on one contexts
    file with each backend, in a temporary directory; ``set_name`` ``search`` (``verification`` is drawn from an
    operator secret)."""
    import time

    import pandas as pd

    from infbench.compression import likelihood as stage
    from infbench.compression import scoring
    from infbench.compression.likelihood_files import read_continuations, read_top

    runs, rows, tops = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="infbench-vllm-likelihood-") as tmp:
        for backend in ("transformers", "vllm"):
            d = Path(tmp) / backend
            d.mkdir()
            common = dict(backend=backend, dtype=dtype, device="cpu", vllm_kv_cache_mib=kv_cache_mib)
            start = time.perf_counter()
            sampled = stage.sample_set(
                "source", checkpoint, contexts_parquet, set_name, str(d / "continuations.parquet"),
                str(d / "sampling.json"), n_tokens=n_tokens, temperature=1.0, seed=0, batch_size=batch_size,
                **common,
            )  # fmt: skip
            sampled_s = time.perf_counter() - start
            scored = stage.score_reference(
                "source", checkpoint, str(d / "continuations.parquet"), str(d / "scores.parquet"),
                str(d / "reference.json"), str(d / "top.npz"), top_k=top_k, batch_size=batch_size,
                bootstrap_resamples=100, seed=0, **common,
            )  # fmt: skip
            runs.append(
                BackendRun(
                    backend=backend,
                    device=sampled.device,
                    ppl=scored.ppl,
                    f_self=scored.f_self,
                    sample_s=sampled_s,
                    score_s=time.perf_counter() - start - sampled_s,
                )
            )
            rows[backend] = read_continuations(d / "continuations.parquet")
            tops[backend] = read_top(d / "top.npz", rows[backend]["index"].to_numpy()).ids[..., 0]
        cross = Path(tmp) / "cross"
        cross.mkdir()
        stage.score_reference(
            "source", checkpoint, str(Path(tmp) / "transformers/continuations.parquet"), str(cross / "scores.parquet"),
            str(cross / "reference.json"), str(cross / "top.npz"), top_k=top_k, batch_size=batch_size,
            bootstrap_resamples=100, seed=0, backend="vllm", dtype=dtype, device="cpu", vllm_kv_cache_mib=kv_cache_mib,
        )  # fmt: skip
        scores = [
            np.stack(pd.read_parquet(Path(tmp) / d / "scores.parquet")["logprobs"]) for d in ("transformers", "cross")
        ]
    ours, theirs = (np.stack(rows[b]["continuation_ids"]) for b in ("transformers", "vllm"))
    same = ours == theirs
    shared = np.cumprod(same, axis=1).astype(bool)  # up to each row's first difference
    diff = np.abs(np.stack(rows["transformers"]["logprobs"]) - np.stack(rows["vllm"]["logprobs"]))[shared]
    return LikelihoodAgreement(
        rows=ours.shape[0],
        tokens=ours.shape[1],
        runs=runs,
        same_tokens=float(same.mean()),
        same_rows=int(same.all(axis=1).sum()),
        shared_positions=int(shared.sum()),
        max_abs_logprob_diff=float(diff.max()),
        mean_abs_logprob_diff=float(diff.mean()),
        top1_agreement=float(np.mean(tops["transformers"][shared] == tops["vllm"][shared])),
        cross_f=scoring.ppl_ratio(*scores),
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--vllm-side", nargs=6, required=True, metavar=("CKPT", "IDS", "N_LAST", "DTYPE", "KV_MIB", "OUT"))
    a = p.parse_args()
    checkpoint, ids_file, n_last, dtype, kv, out = a.vllm_side
    vllm_side(checkpoint, ids_file, int(n_last), dtype, int(kv), out)
    sys.exit(0)
