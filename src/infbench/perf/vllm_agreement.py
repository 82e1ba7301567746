"""vLLM against transformers on one checkpoint: the teacher-forced log-probs of the same rows through the ``vllm``
runtime (:mod:`infbench.compression.runtimes.vllm`, run by the vLLM environment's interpreter,
:func:`infbench.vllm_env.vllm_python`) and through the ``hf`` runtime, per dtype: the largest and mean absolute
difference of the log-probs of the rows' own tokens, and how often the two argmaxes agree. Every log-prob is
computed here from each engine's raw logits (float32 log-softmax), as the pipeline computes them.

``infbench bench-vllm-agreement``; ``python -m infbench.perf.vllm_agreement --vllm-side ...`` is the vLLM half.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


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


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--vllm-side", nargs=6, required=True, metavar=("CKPT", "IDS", "N_LAST", "DTYPE", "KV_MIB", "OUT"))
    a = p.parse_args()
    checkpoint, ids_file, n_last, dtype, kv, out = a.vllm_side
    vllm_side(checkpoint, ids_file, int(n_last), dtype, int(kv), out)
    sys.exit(0)
