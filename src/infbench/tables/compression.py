"""``results/tables/compression.{csv,md}``: the paper's Table A3 layout, one row per
task x candidate (its figure, Figure 1a: :mod:`infbench.plots.accuracy_vs_bits`).

Each row names the operator secret its verification set was drawn from
(``verification_set``); the Markdown table ends with one line per secret, e.g.
``verification set: public demo`` when the embedded demo secret was used. ``isolation`` says how the
package's process was sandboxed; a verdict reached without a sandbox ends in "(unsandboxed)".

Beside ``f_v``, how far the candidate's next-token distributions are from the source's on the verification
set (:mod:`infbench.compression.divergence`, llama.cpp's ``--kl-divergence`` statistics; reported, never part
of the score or the verdict): ``kld_mean`` (nats per token) with its 95% bootstrap interval over contexts,
``kld_median``, ``kld_p99``, ``kld_max``, ``same_top_p`` (top-1 agreement with the source) and the 1st, 50th
and 99th percentiles of ``Δp = q(y) - p(y)``, the sampled token's change of probability (``dp_*``).

The accuracy gate's columns: ``accuracy`` (the candidate's ``A``) and ``accuracy_bf16``
(the source's ``A(p)``), each with the Wilson score 95% interval of its correct answers over
``gate_questions`` questions (the three benchmarks pooled: ``A`` itself when every benchmark asks the
same number, as both profiles do), and ``gate_threshold`` = ``rho * A(p)``."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from infbench.compression.records import DivergenceSummary, EvaluationRecord
from infbench.hashing import sha256_file
from infbench.sandbox.launch import isolation, marked
from infbench.tables.io import write_table


class CompressionRow(BaseModel):
    task: str
    source: str
    limit_gib: float
    method: str
    runtime: str | None
    ppl: float | None
    f_v: float | None
    kld_mean: float | None
    kld_ci95_low: float | None
    kld_ci95_high: float | None
    kld_median: float | None
    kld_p99: float | None
    kld_max: float | None
    same_top_p: float | None
    dp_p1: float | None
    dp_median: float | None
    dp_p99: float | None
    accuracy: float | None
    accuracy_ci95_low: float | None
    accuracy_ci95_high: float | None
    accuracy_bf16: float | None
    accuracy_bf16_ci95_low: float | None
    accuracy_bf16_ci95_high: float | None
    gate_questions: int | None
    gate_threshold: float | None
    package_gib: float | None
    resident_gib: float | None
    bits_per_param: float | None
    tps: float | None
    verdict: str
    score: float
    verification_set: str | None  # the operator secret's label: "public demo" or "operator secret <fingerprint>"
    isolation: str  # "bubblewrap <version>", or "UNSANDBOXED (<why>)" (sandbox.allow_unsandboxed)


def wilson(counts: dict[str, tuple[int, int]] | None) -> tuple[float | None, float | None]:
    """Wilson score 95% interval of the correct answers pooled over the benchmarks."""
    if not counts:
        return None, None
    from scipy.stats import binomtest  # 1.7 s of imports: only where a row has gate counts

    correct, asked = (sum(c[i] for c in counts.values()) for i in (0, 1))
    interval = binomtest(correct, asked).proportion_ci(confidence_level=0.95, method="wilson")
    return float(interval.low), float(interval.high)


def _gate_threshold(r: EvaluationRecord) -> float | None:
    gate = next((c for c in r.checks if c.name == "accuracy_gate"), None)
    return gate.evidence.get("threshold") if gate else None


DIVERGENCE_COLUMNS = (
    "kld_mean",
    "kld_ci95_low",
    "kld_ci95_high",
    "kld_median",
    "kld_p99",
    "kld_max",
    "same_top_p",
    "dp_p1",
    "dp_median",
    "dp_p99",
)


def divergence_columns(d: DivergenceSummary | None) -> dict[str, float | None]:
    """The divergence columns of a record; None where it has none (it failed before scoring)."""
    if d is None:
        return dict.fromkeys(DIVERGENCE_COLUMNS)
    values = (
        d.kld_mean,
        *d.kld_mean_ci95,
        d.kld_percentiles["p50"],
        d.kld_percentiles["p99"],
        d.kld_max,
        d.same_top_p,
        d.dp_percentiles["p1"],
        d.dp_percentiles["p50"],
        d.dp_percentiles["p99"],
    )
    return dict(zip(DIVERGENCE_COLUMNS, values))


def row(r: EvaluationRecord) -> CompressionRow:
    (low, high), (ref_low, ref_high) = wilson(r.accuracy_counts), wilson(r.accuracy_ref_counts)
    return CompressionRow(
        task=r.task,
        source=r.source,
        limit_gib=r.limit_gib,
        method=r.submission,
        runtime=r.runtime,
        ppl=r.ppl,
        f_v=r.f,
        **divergence_columns(r.divergence),
        accuracy=r.accuracy_mean,
        accuracy_ci95_low=low,
        accuracy_ci95_high=high,
        accuracy_bf16=r.accuracy_ref,
        accuracy_bf16_ci95_low=ref_low,
        accuracy_bf16_ci95_high=ref_high,
        gate_questions=sum(n for _, n in r.accuracy_counts.values()) if r.accuracy_counts else None,
        gate_threshold=_gate_threshold(r),
        package_gib=r.s_pkg_gib,
        resident_gib=r.s_res_gib,
        bits_per_param=r.package_bits_per_param,
        tps=r.decode.tps if r.decode else None,
        verdict=marked("verified" if r.failed_check is None else f"failed: {r.failed_check}", r.sandbox),
        score=r.score or 0.0,
        verification_set=r.secret_label,
        isolation=isolation(r.sandbox),
    )


def read(records: list[str], labels: dict[str, str] | None = None) -> list[tuple[EvaluationRecord, str]]:
    """Each verification record with the method name to show: ``labels`` maps a record path to it
    (a run's final submission: its agent), else the submission's name."""
    out = []
    for path in records:
        r = EvaluationRecord.model_validate_json(Path(path).read_text())
        out.append((r, (labels or {}).get(path, r.submission)))
    return out


def rows_of(judged: list[tuple[EvaluationRecord, str]]) -> list[CompressionRow]:
    """The table's rows from labelled records (:func:`read`): by source, limit, then bits per parameter."""
    return sorted(
        (row(r).model_copy(update={"method": label}) for r, label in judged),
        key=lambda r: (r.source, r.limit_gib, -(r.bits_per_param or 0), r.method),
    )


def write(
    records: list[str],
    sources: list[str],
    *,
    csv_path: str,
    md_path: str,
    provenance_path: str,
    config: dict,
    labels: dict[str, str] | None = None,
) -> list[tuple[EvaluationRecord, str]]:
    """The table; returns the labelled records (:func:`read`) for the figure."""
    judged = read(records, labels)
    rows = rows_of(judged)
    secrets = sorted({r.verification_set or "unknown" for r in rows})
    write_table(
        rows,
        csv_path=csv_path,
        md_path=md_path,
        provenance_path=provenance_path,
        params={"table": "compression"},
        config=config,
        inputs={p: sha256_file(p) for p in [*records, *sources]},
        md_notes=[f"verification set: {label}" for label in secrets],
    )
    return judged
