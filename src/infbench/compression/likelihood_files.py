"""The files of the reference likelihood stage (:mod:`infbench.compression.likelihood`): the parquet
schemas of the sampled continuations and the reference scores, the source's top log-probs, the two JSON
summaries, and reading them back. numpy, pandas, pyarrow and pydantic only: tables and verification read
these without the torch stack."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.errors import InputFileError

CONTINUATIONS_SCHEMA = pa.schema(
    [
        ("set", pa.string()),
        ("index", pa.int32()),
        ("family", pa.string()),
        ("doc_id", pa.string()),
        ("context_ids", pa.list_(pa.int32())),
        ("continuation_ids", pa.list_(pa.int32())),
        ("logprobs", pa.list_(pa.float32())),
    ]
)
SCORES_SCHEMA = pa.schema([("index", pa.int32()), ("logprobs", pa.list_(pa.float32()))])


class SamplingSummary(BaseModel):
    source: str
    set: str
    backend: str
    dtype: str
    device: str
    n_contexts: int
    context_tokens: int
    continuation_tokens: int
    temperature: float
    seed: int  # likelihood.seed; the verification set's sampling seed is drawn from it and the secret
    secret_label: str | None  # verification: the operator secret the sampling seed came from; search: None
    batch_size: int
    cross_entropy: float
    ppl: float
    provenance: provenance.Provenance


class ReferenceSummary(BaseModel):
    source: str
    set: str
    backend: str
    dtype: str
    n_contexts: int
    tokens_scored: int
    cross_entropy: float
    ppl: float
    sampler_ppl: float
    f_self: float
    f_self_ci95: tuple[float, float]
    max_abs_logprob_diff: float
    secret_label: str | None  # as the set's sampling.json
    provenance: provenance.Provenance


@dataclass(frozen=True)
class TopLogProbs:
    """``reference_top.npz``: the source's ``k`` most probable tokens at every scored position of a set and
    their log-probs (of the raw logits), rows in the order of ``index``; what the divergence diagnostics
    (:mod:`infbench.compression.divergence`) compare a candidate's logits with."""

    ids: np.ndarray  # [n, M, k] int32, most probable first
    logprobs: np.ndarray  # [n, M, k] float32


def write_top(path: str | Path, index: np.ndarray, top: TopLogProbs) -> None:
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, index=np.asarray(index, dtype=np.int32), ids=top.ids, logprobs=top.logprobs)


def read_top(path: str | Path, index: np.ndarray) -> TopLogProbs:
    """The top log-probs in ``path`` of the rows ``index`` (a set's, sorted), which must be the file's."""
    with np.load(path) as f:
        if not np.array_equal(f["index"], np.asarray(index)):
            raise InputFileError(path, "field 'index' is not the scored set's rows: the file is another set's")
        return TopLogProbs(ids=f["ids"], logprobs=f["logprobs"])


def read_continuations(path: str | Path) -> pd.DataFrame:
    return pq.read_table(path).to_pandas().sort_values("index").reset_index(drop=True)


def stack(column: pd.Series, dtype) -> np.ndarray:
    return np.stack([np.asarray(v, dtype=dtype) for v in column])
