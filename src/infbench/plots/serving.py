"""Gross value G against qualified share f per replay (ServerBench Figure 4 layout)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from infbench import atomic  # noqa: E402
from infbench.tables.serving import ServingRow  # noqa: E402


def plot(rows: list[ServingRow], out_png: str) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for r in rows:
        if r.f is None:
            continue
        ax.scatter([r.f], [r.G], s=40)
        ax.annotate(f"{r.system} @{r.concurrency}", (r.f, r.G), textcoords="offset points", xytext=(4, 4),
                    fontsize=8)
    ax.set_xlabel("qualified share f = D / G")
    ax.set_ylabel("gross value G (USD per USD)")
    ax.set_xlim(-0.05, 1.05)
    ax.set_title(rows[0].deployment if rows else "")
    fig.tight_layout()
    with atomic.atomic_path(out_png) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    plt.close(fig)
