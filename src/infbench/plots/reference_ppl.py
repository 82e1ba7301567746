"""Per-context PPL of the BF16 reference, by set and source family."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pyarrow.parquet as pq

from infbench import atomic


def plot(items: list[tuple[tuple[str, str], str, str]], out_png: str) -> None:
    """``items``: ((source, set), continuations.parquet, reference_scores.parquet)."""
    fig, axes = plt.subplots(1, len(items), figsize=(4.5 * len(items), 3.6), squeeze=False, sharey=True)
    for ax, ((source, set_name), continuations, scores) in zip(axes[0], items):
        families = pq.read_table(continuations, columns=["index", "family"]).to_pandas().set_index("index")
        scored = pq.read_table(scores).to_pandas().set_index("index")
        ppl = scored["logprobs"].map(lambda lp: float(np.exp(-np.mean(lp, dtype=np.float64))))
        for family, idx in families.groupby("family").groups.items():
            ax.hist(np.log(ppl.loc[idx]), bins=15, alpha=0.6, label=f"{family} (n={len(idx)})")
        ax.set_title(f"{source} / {set_name}")
        ax.set_xlabel("ln PPL per context (teacher-forced BF16)")
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("contexts")
    fig.tight_layout()
    with atomic.atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
