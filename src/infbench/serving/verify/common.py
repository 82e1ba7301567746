"""Verification settings (config ``serving.verification``) and the result of one check."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infbench.config_io import section


class CheckResult(BaseModel):
    """One check: its name, pass/fail and the evidence (counts, examples, the cause of a failure)."""
    name: str
    passed: bool
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class VerifySettings(BaseModel):
    """``serving.verification``; defaults live in the schema (the paper's values)."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    context_probes: int = Field(ge=0)
    context_probe_output_tokens: int = Field(ge=1)
    eos_probes: int = Field(ge=0)
    eos_max_tokens: int = Field(ge=2)
    eos_lead_tokens: int = Field(ge=0)
    eos_candidates: int = Field(ge=1)
    probe_timeout_s: float = Field(gt=0)
    fidelity_max_suspects: int = Field(ge=0)
    fidelity_sampled_suspects: int = Field(ge=0)
    fidelity_proxy_pool: int = Field(ge=0)
    fidelity_regret_tolerance: float = Field(gt=0)
    fidelity_repeat_run: int = Field(ge=2)
    fidelity_proxy_context: int = Field(ge=1)
    far_context_checks: int = Field(ge=0)
    far_context_margin: float = Field(gt=0)
    far_context_max_miss_share: float = Field(ge=0, le=1)
    answers_n: int = Field(ge=0)
    answers_slack: float = Field(ge=0, le=1)
    answers_benchmarks: tuple[Literal["gsm8k", "triviaqa"], ...] = Field(min_length=1)
    reference_dtype: Literal["float32", "bfloat16"]


def settings_from(serving: dict[str, Any]) -> VerifySettings:
    return section(serving, "verification", VerifySettings, path="serving.verification")
