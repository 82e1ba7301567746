"""``results/tables/compression.{csv,md}``: the paper's Table A3 layout, one row per
task x candidate, and accuracy / F against package bits per parameter (Figure 1a).

Each row names the operator secret its verification set was drawn from
(``verification_set``); the Markdown table ends with one line per secret, e.g.
``verification set: public demo`` when the embedded demo secret was used."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from pydantic import BaseModel

from infbench import atomic
from infbench.compression.evaluation import EvaluationRecord
from infbench.hashing import sha256_file
from infbench.tables.io import write_table


class CompressionRow(BaseModel):
    task: str
    source: str
    limit_gib: float
    method: str
    runtime: str | None
    ppl: float | None
    f_v: float | None
    accuracy: float | None
    accuracy_bf16: float | None
    package_gib: float | None
    resident_gib: float | None
    bits_per_param: float | None
    tps: float | None
    verdict: str
    score: float
    verification_set: str | None  # the operator secret's label: "public demo" or "operator secret <fingerprint>"


def row(r: EvaluationRecord) -> CompressionRow:
    return CompressionRow(
        task=r.task, source=r.source, limit_gib=r.limit_gib, method=r.submission, runtime=r.runtime, ppl=r.ppl,
        f_v=r.f, accuracy=r.accuracy_mean, accuracy_bf16=r.accuracy_ref, package_gib=r.s_pkg_gib,
        resident_gib=r.s_res_gib, bits_per_param=r.package_bits_per_param,
        tps=r.decode.tps if r.decode else None,
        verdict="verified" if r.failed_check is None else f"failed: {r.failed_check}", score=r.score or 0.0,
        verification_set=r.secret_label,
    )


def _plot(rows: list[CompressionRow], path: str) -> None:
    measured = {(r.method, r.source): r for r in rows if r.bits_per_param is not None}.values()
    has_acc = any(r.accuracy is not None and r.accuracy_bf16 for r in measured)
    panels = 2 if has_acc else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    ax = axes[0][0]
    for r in measured:
        if r.f_v is not None:
            ax.scatter(r.bits_per_param, r.f_v)
            ax.annotate(r.method, (r.bits_per_param, r.f_v), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("package bits per source parameter")
    ax.set_ylabel("F_v = PPL(BF16) / PPL(candidate)")
    ax.axhline(1.0, color="grey", lw=0.5)
    if has_acc:
        ax = axes[0][1]
        for r in measured:
            if r.accuracy is not None and r.accuracy_bf16:
                rel = r.accuracy / r.accuracy_bf16
                ax.scatter(r.bits_per_param, rel)
                ax.annotate(r.method, (r.bits_per_param, rel), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.axhline(0.8, color="red", lw=0.8, ls="--", label="gate rho = 0.8")
        ax.set_xlabel("package bits per source parameter")
        ax.set_ylabel("mean accuracy relative to BF16")
        ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def write(records: list[str], sources: list[str], *, csv_path: str, md_path: str, provenance_path: str,
          plot_path: str, config: dict, labels: dict[str, str] | None = None) -> None:
    """``labels``: record path -> the method name to show (a run's final submission: its agent)."""
    def labelled(path: str) -> CompressionRow:
        r = row(EvaluationRecord.model_validate_json(Path(path).read_text()))
        return r.model_copy(update={"method": (labels or {}).get(path, r.method)})

    rows = sorted((labelled(p) for p in records),
                  key=lambda r: (r.source, r.limit_gib, -(r.bits_per_param or 0), r.method))
    secrets = sorted({r.verification_set or "unknown" for r in rows})
    write_table(rows, csv_path=csv_path, md_path=md_path, provenance_path=provenance_path,
                params={"table": "compression"}, config=config,
                inputs={p: sha256_file(p) for p in [*records, *sources]},
                md_notes=[f"verification set: {label}" for label in secrets])
    _plot(rows, plot_path)
