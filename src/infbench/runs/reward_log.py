"""``reward_log.jsonl``: the lines ``infbench reward`` appends (one EvaluationRecord each)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from infbench.compression.evaluation import EvaluationRecord
from infbench.runs.jsonl import RunError, check_order, first_error, objects
from infbench.runs.schema import RewardCall


def events(path: Path) -> list[RewardCall]:
    calls, times = [], []
    for line, obj in objects(path):
        try:
            record = EvaluationRecord.model_validate(obj)
        except ValidationError as exc:
            raise RunError(path, f"not a reward record: {first_error(exc)}", line) from None
        if record.finished_at is None or record.reward is None:
            raise RunError(path, "a reward record needs 'finished_at' and 'reward' (written by infbench reward)",
                           line)
        calls.append(RewardCall(time=record.finished_at, submission=record.submission,
                                content_hash=record.content_hash, reward=record.reward, f=record.f, ppl=record.ppl,
                                ref_ppl=record.ref_ppl, s_pkg_bytes=record.s_pkg_bytes,
                                s_res_bytes=record.s_res_bytes, failed_check=record.failed_check,
                                wall_s=record.wall_s))
        times.append((line, record.finished_at))
    check_order(path, times)
    return calls
