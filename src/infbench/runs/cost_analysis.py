"""Tokens and estimated API cost per run; final artifacts against cost (Figure 1)."""

from __future__ import annotations

from pydantic import BaseModel

from infbench.compression.records import EvaluationRecord
from infbench.config.model import Price
from infbench.runs.schema import ReplayCall, RewardCall, RunRecord, TokenUsage, ToolCall


class CostRow(BaseModel):
    run: str
    agent: str
    input_tokens: int
    cache_write_tokens: int
    cached_tokens: int
    output_tokens: int
    cost_usd: float
    unpriced_models: str  # models of the transcripts without a price (charged at the agent model's price)
    evaluator_calls: int
    tool_calls: int
    wall_hours: float


def cost(records: list[RunRecord], prices: dict[str, dict]) -> list[CostRow]:
    table = {m: Price.model_validate(p) for m, p in prices.items()}
    rows = []
    for rec in records:
        usage = [e for e in rec.events if isinstance(e, TokenUsage)]
        unpriced = sorted({u.model for u in usage if u.model not in table})
        rows.append(
            CostRow(
                run=rec.run,
                agent=rec.spec.agent.model,
                input_tokens=sum(u.input for u in usage),
                cache_write_tokens=sum(u.cache_write for u in usage),
                cached_tokens=sum(u.cached for u in usage),
                output_tokens=sum(u.output for u in usage),
                cost_usd=sum(table.get(u.model, table[rec.spec.agent.model]).usd(u) for u in usage),
                unpriced_models=", ".join(unpriced),
                evaluator_calls=sum(isinstance(e, (RewardCall, ReplayCall)) for e in rec.events),
                tool_calls=sum(isinstance(e, ToolCall) for e in rec.events),
                wall_hours=(rec.spec.end - rec.spec.start).total_seconds() / 3600,
            )
        )
    return rows


class FrontierRow(BaseModel):
    run: str
    agent: str
    task: str
    cost_usd: float
    bits_per_param: float | None
    ppl_v: float | None
    ppl_rank: int | None  # 1 = lowest verified PPL among the runs of the task
    accuracy_rel: float | None  # mean accuracy / BF16's
    verdict: str


def frontier(costs: list[CostRow], verified: dict[str, EvaluationRecord]) -> list[FrontierRow]:
    """Each compression run's final artifact as verified on its task, against its cost."""
    rows = []
    for c in costs:
        r = verified.get(c.run)
        if r is None:
            continue
        rows.append(
            FrontierRow(
                run=c.run,
                agent=c.agent,
                task=r.task,
                cost_usd=c.cost_usd,
                bits_per_param=r.package_bits_per_param,
                ppl_v=r.ppl,
                ppl_rank=None,
                accuracy_rel=r.accuracy_mean / r.accuracy_ref
                if r.accuracy_mean is not None and r.accuracy_ref
                else None,
                verdict="verified" if r.failed_check is None else f"failed: {r.failed_check}",
            )
        )
    for task in {r.task for r in rows}:
        ranked = sorted(
            (r for r in rows if r.task == task and r.ppl_v is not None and r.verdict == "verified"),
            key=lambda r: r.ppl_v,
        )
        for rank, r in enumerate(ranked, start=1):
            r.ppl_rank = rank
    return rows
