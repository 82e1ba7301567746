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
