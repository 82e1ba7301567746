"""``results/plots/reference_ppl.{png,csv}``: per-context perplexity of the BF16 reference on its
own sampled continuations, one panel per source and set, stacked by source family on shared bins;
the dashed line is the set's reference ``PPL_D(p)`` (over all its tokens). The CSV has one row
per context."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from infbench.plots import figure  # noqa: E402

BINS = 20


class ContextPoint(BaseModel):
    source: str
    set: str
    index: int
    family: str
    tokens: int
    ppl: float  # exp(-mean log-prob) of the context's scored continuation tokens
    ln_ppl: float


def points(items: list[tuple[tuple[str, str], str, str]]) -> list[ContextPoint]:
    """``items``: ((source, set), continuations.parquet, reference_scores.parquet)."""
    out = []
    for (source, set_name), continuations, scores in items:
        families = pq.read_table(continuations, columns=["index", "family"]).to_pandas().set_index("index")["family"]
        scored = pq.read_table(scores, columns=["index", "logprobs"]).to_pandas()
        for index, lp in zip(scored["index"], scored["logprobs"]):
            lp = np.asarray(lp, dtype=np.float64)
            ln_ppl = float(-lp.mean())
            out.append(
                ContextPoint(
                    source=source,
                    set=set_name,
                    index=int(index),
                    family=str(families[index]),
                    tokens=int(lp.size),
                    ppl=float(np.exp(ln_ppl)),
                    ln_ppl=ln_ppl,
                )
            )
    return out


def _set_ppl(pts: list[ContextPoint]) -> float:
    """The set's PPL over all its tokens (every context weighted by its token count)."""
    return float(np.exp(sum(p.ln_ppl * p.tokens for p in pts) / sum(p.tokens for p in pts)))


def draw(pts: list[ContextPoint]) -> Figure:
    panels = list(dict.fromkeys((p.source, p.set) for p in pts))
    families = sorted({p.family for p in pts})
    fig, axes = plt.subplots(
        1, max(1, len(panels)), figsize=(4.8 * max(1, len(panels)), 3.8), squeeze=False, sharex=True
    )
    if not pts:
        figure.say_empty(axes[0][0], "no reference scores")
    values = [p.ln_ppl for p in pts] or [0.0]
    edges = np.histogram_bin_edges(values, bins=BINS)
    for ax, (source, set_name) in zip(axes[0], panels):
        mine = [p for p in pts if (p.source, p.set) == (source, set_name)]
        stacks = [[p.ln_ppl for p in mine if p.family == f] for f in families]
        ax.hist(
            stacks,
            bins=edges,
            stacked=True,
            color=[f"C{i}" for i in range(len(families))],
            label=[f"{f} (n = {len(s)})" for f, s in zip(families, stacks)],
        )
        reference = _set_ppl(mine)
        ax.axvline(np.log(reference), color="0.2", ls="--", lw=1)
        ax.text(
            np.log(reference),
            0.98,
            f" PPL_D(p) = {reference:.4g}",
            transform=ax.get_xaxis_transform(),
            fontsize=7,
            va="top",
            bbox=figure.LABEL_BOX,
        )
        ax.set_title(f"{source} / {set_name} set ({len(mine)} contexts)", fontsize=9)
        ax.set_xlabel("ln PPL per context (teacher-forced BF16)")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(
            title="source family",
            fontsize=7,
            title_fontsize=7,
            loc="upper left",
            bbox_to_anchor=(0, -0.2),
            frameon=False,
        )
    axes[0][0].set_ylabel("contexts")
    fig.tight_layout()
    return fig


def plot(pts: list[ContextPoint], png_path: str, csv_path: str) -> None:
    figure.save(draw(pts), png_path, pts, ContextPoint, csv_path)
