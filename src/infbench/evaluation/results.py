"""Answer results: per-item records, accuracies, the gate; JSON and parquet files.

``AnswerResults`` is the one record of an evaluation. ``protocol_sha256``
hashes what must be identical between the source and a candidate for the gate
to compare them: every item's benchmark, id and prompt hash, and each
benchmark's ``max_new_tokens`` and stop sequences.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from infbench import atomic
from infbench.config.model import AnswerSettings, Benchmark
from infbench.errors import InputFileError
from infbench.provenance import Provenance

ITEMS_SCHEMA = pa.schema(
    [
        ("benchmark", pa.string()),
        ("id", pa.string()),
        ("prompt_sha256", pa.string()),
        ("completion", pa.string()),
        ("response", pa.string()),
        ("extracted", pa.string()),
        ("correct", pa.bool_()),
        ("detail", pa.string()),
        ("tokens", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
    ]
)


class ItemRecord(BaseModel):
    benchmark: Benchmark
    id: str
    prompt_sha256: str
    completion: str  # as the runtime returned it
    response: str  # cut at the first stop sequence: what is judged
    extracted: str | None  # GSM8K final number, TriviaQA normalised answer; None for HumanEval
    correct: bool
    detail: str  # HumanEval: the judge's outcome and reason ("passed", "failed: AssertionError",
    # "failed: the candidate exited before call 1", "timed_out: no verdict within 3.0 s"); else ""
    tokens: list[int] = []  # the generated token ids, as generated (where the runtime gives them)
    logprobs: list[float] = []  # the model's own log-prob of each (its log-softmax at the token it generated)


class BenchmarkAccuracy(BaseModel):
    benchmark: Benchmark
    origin: str
    n: int
    n_correct: int
    accuracy: float
    judged_by: str = ""  # HumanEval: how its programs were isolated ("bubblewrap 0.8.0", "UNSANDBOXED (...)")


class AnswerResults(BaseModel):
    label: str  # the model evaluated: a source name or a submission
    settings: AnswerSettings
    protocol_sha256: str
    benchmarks: list[BenchmarkAccuracy]
    mean_accuracy: float  # A: the three benchmark accuracies averaged equally
    items: list[ItemRecord]
    wall_s: float
    secret_label: str | None = None  # the operator secret the questions were drawn from (the pipeline's A(p))
    provenance: Provenance | None = None

    def accuracy(self, benchmark: Benchmark) -> float:
        return next(b.accuracy for b in self.benchmarks if b.benchmark == benchmark)


class GateResult(BaseModel):
    """``A(a) >= rho * A(p)`` (PROTOCOL A5.2)."""

    candidate_accuracy: float
    reference_accuracy: float
    rho: float
    threshold: float
    passed: bool
    per_benchmark: dict[str, tuple[float, float]]  # benchmark -> (candidate, reference)


def write_json(path: str | Path, results: AnswerResults) -> None:
    atomic.write_json(path, results.model_dump(mode="json"))


def read_json(path: str | Path) -> AnswerResults:
    try:
        return AnswerResults.model_validate_json(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputFileError(path, f"not a readable answer-results record: {exc}") from None


def write_items_parquet(path: str | Path, results: AnswerResults) -> None:
    frame = pd.DataFrame([item.model_dump() for item in results.items], columns=ITEMS_SCHEMA.names)
    atomic.write_parquet(path, frame, ITEMS_SCHEMA)


def read_items_parquet(path: str | Path) -> list[ItemRecord]:
    frame = pq.read_table(path).to_pandas()
    return [
        ItemRecord.model_validate(
            {k: ([*v] if k in ("tokens", "logprobs") else None if pd.isna(v) else v) for k, v in row.items()}
        )
        for row in frame.to_dict(orient="records")
    ]
