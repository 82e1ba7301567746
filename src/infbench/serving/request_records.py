"""A replay's request records: one :class:`RequestRecord` per request sent, written as parquet with
:data:`RECORD_SCHEMA`."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel, Field

from infbench import atomic


class RequestRecord(BaseModel):
    """One row of the replay's parquet file; times in seconds since replay start."""

    run_id: str
    instance: int
    session_id: str
    request_id: str
    chain: str
    input_tokens: int
    max_tokens: int
    ready_time: float
    send_time: float
    first_token_time: float
    last_token_time: float
    end_time: float
    in_window: bool
    ok: bool
    error: str
    context_overflow: bool
    instance_requests: int = Field(description="requests of this session instance the replay sends")
    n_chunks: int = Field(description="chunks that carried token ids or text")
    id_chunks: int = Field(description="chunks that carried at least one token id (the arrivals)")
    text_chunks_without_ids: int = Field(description="chunks with text but no token id (never a token arrival)")
    counts_from_token_ids: bool = Field(
        description="output counted and timed by streamed token ids (false: by usage and text chunks, unverified)"
    )
    streamed_token_ids: list[int]
    token_arrivals: list[float] = Field(
        description="arrival of each streamed token id, seconds after send (the "
        "ids of one chunk share their chunk's arrival)"
    )
    text: str
    usage_prompt_tokens: int | None
    usage_completion_tokens: int | None
    output_tokens: int
    ttft: float
    tpot: float
    server_ttft: float | None = Field(description="the server's own first-token minus receive stamp, if it sends them")
    server_receive_time: float | None = Field(description="the server's receive stamp on this clock, if it sends one")


RECORD_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("instance", pa.int64()),
        ("session_id", pa.string()),
        ("request_id", pa.string()),
        ("chain", pa.string()),
        ("input_tokens", pa.int64()),
        ("max_tokens", pa.int64()),
        ("ready_time", pa.float64()),
        ("send_time", pa.float64()),
        ("first_token_time", pa.float64()),
        ("last_token_time", pa.float64()),
        ("end_time", pa.float64()),
        ("in_window", pa.bool_()),
        ("ok", pa.bool_()),
        ("error", pa.string()),
        ("context_overflow", pa.bool_()),
        ("instance_requests", pa.int64()),
        ("n_chunks", pa.int64()),
        ("id_chunks", pa.int64()),
        ("text_chunks_without_ids", pa.int64()),
        ("counts_from_token_ids", pa.bool_()),
        ("streamed_token_ids", pa.list_(pa.int64())),
        ("token_arrivals", pa.list_(pa.float64())),
        ("text", pa.string()),
        ("usage_prompt_tokens", pa.int64()),
        ("usage_completion_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("ttft", pa.float64()),
        ("tpot", pa.float64()),
        ("server_ttft", pa.float64()),
        ("server_receive_time", pa.float64()),
    ]
)


def write_records(records: list[RequestRecord], path: str) -> pd.DataFrame:
    """The records as parquet with :data:`RECORD_SCHEMA` (typed even when a replay completed nothing)."""
    frame = pd.DataFrame([r.model_dump() for r in records], columns=list(RequestRecord.model_fields))
    atomic.write_parquet(path, frame, RECORD_SCHEMA)
    return frame
