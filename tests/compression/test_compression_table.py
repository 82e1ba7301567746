"""The compression table's accuracy-gate columns: each accuracy with the Wilson score interval of its counts."""

import math

import pytest

from infbench.checks import Check
from infbench.compression.records import EvaluationRecord
from infbench.tables import compression


def _wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    p = k / n
    centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)


def test_the_gate_columns_carry_wilson_intervals_of_the_pooled_counts():
    record = EvaluationRecord(
        kind="verification",
        submission="q4",
        task="t",
        source="s",
        limit_gib=0.1,
        accuracy_mean=1 / 3,
        accuracy_ref=0.4,
        accuracy_counts={"gsm8k": (1, 10), "humaneval": (0, 10), "triviaqa": (9, 10)},
        accuracy_ref_counts={"gsm8k": (2, 10), "humaneval": (0, 10), "triviaqa": (10, 10)},
        checks=[Check(name="accuracy_gate", passed=True, evidence={"threshold": 0.32})],
    )
    row = compression.row(record)
    assert (row.accuracy_ci95_low, row.accuracy_ci95_high) == pytest.approx(_wilson(10, 30), abs=1e-6)
    assert (row.accuracy_bf16_ci95_low, row.accuracy_bf16_ci95_high) == pytest.approx(_wilson(12, 30), abs=1e-6)
    assert row.gate_questions == 30 and row.gate_threshold == 0.32
    none = compression.row(
        EvaluationRecord(
            kind="verification", submission="x", task="t", source="s", limit_gib=0.1, failed_check="execution"
        )
    )
    assert none.accuracy_ci95_low is None and none.gate_questions is None and none.gate_threshold is None
    zero = compression.row(record.model_copy(update={"accuracy_counts": {"gsm8k": (0, 26)}}))
    assert zero.accuracy_ci95_low == 0.0 and zero.accuracy_ci95_high == pytest.approx(_wilson(0, 26)[1], abs=1e-6)


def test_the_divergence_columns_sit_beside_f_v_and_leave_the_verdict_alone():
    """The divergence diagnostics are reported beside F_v (and empty for a record without them); the verdict
    and score come from the checks alone."""
    import numpy as np

    from infbench.compression import divergence

    rng = np.random.default_rng(0)
    kl, same, dp = rng.exponential(0.2, (4, 8)), rng.random((4, 8)) < 0.8, rng.normal(0, 0.1, (4, 8))
    summary = divergence.summarize(kl, same, dp, top_k=16, p_rest_mean=0.01, n_resamples=200, seed=0)
    base = EvaluationRecord(kind="verification", submission="q", task="t", source="s", limit_gib=0.1, f=0.9, score=0.9)
    row = compression.row(base.model_copy(update={"divergence": summary}))
    assert row.kld_mean == pytest.approx(kl.mean()) and row.kld_median == pytest.approx(np.median(kl))
    assert row.kld_ci95_low <= row.kld_mean <= row.kld_ci95_high and row.kld_max == pytest.approx(kl.max())
    assert row.same_top_p == pytest.approx(same.mean()) and row.dp_p99 == pytest.approx(np.percentile(dp, 99))
    assert (row.verdict, row.score) == (compression.row(base).verdict, compression.row(base).score)
    assert all(getattr(compression.row(base), c) is None for c in compression.DIVERGENCE_COLUMNS)
    assert list(compression.CompressionRow.model_fields).index("kld_mean") == 1 + list(
        compression.CompressionRow.model_fields
    ).index("f_v")
