"""The files of the reference likelihood stage (:mod:`infbench.compression.likelihood`): the parquet
schemas of the sampled continuations and the reference scores, the two JSON summaries, and reading them
back. numpy, pandas, pyarrow and pydantic only: tables and verification read these without the torch
stack."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from infbench import provenance

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


def read_continuations(path: str | Path) -> pd.DataFrame:
    return pq.read_table(path).to_pandas().sort_values("index").reset_index(drop=True)


def stack(column: pd.Series, dtype) -> np.ndarray:
    return np.stack([np.asarray(v, dtype=dtype) for v in column])
