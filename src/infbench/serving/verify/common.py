"""Verification settings (config ``serving.verification``) and the result of one check."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class CheckResult(BaseModel):
    """One check: its name, pass/fail and the evidence (counts, examples, the cause of a failure)."""

    name: str
    passed: bool
    summary: str
    evidence: dict[str, Any] = Field(default_factory=dict)
