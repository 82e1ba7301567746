"""``reward_log.jsonl``: the lines ``infbench reward`` appends (one EvaluationRecord each)."""

from __future__ import annotations

from pathlib import Path

from infbench.runs.jsonl import timed_events
from infbench.runs.schema import RewardCall


def _call(obj: dict) -> RewardCall:
    # imported here: the workflow discovers runs at start, and evaluation pulls in torch (seconds)
    from infbench.compression.records import EvaluationRecord

    record = EvaluationRecord.model_validate(obj)
    if record.finished_at is None or record.reward is None:
        raise ValueError("a reward record needs 'finished_at' and 'reward' (written by infbench reward)")
    return RewardCall(
        time=record.finished_at,
        submission=record.submission,
        content_hash=record.content_hash,
        reward=record.reward,
        f=record.f,
        ppl=record.ppl,
        ref_ppl=record.ref_ppl,
        s_pkg_bytes=record.s_pkg_bytes,
        s_res_bytes=record.s_res_bytes,
        failed_check=record.failed_check,
        wall_s=record.wall_s,
    )


def events(path: Path) -> list[RewardCall]:
    return timed_events(path, "a reward record", _call)
