"""A named check of a verdict and its evidence; the failure that stops a measurement at a named check.

Standard library and pydantic only: the sandboxed package worker imports it (through
:mod:`infbench.compression.logits_pipe`) without the pipeline's scoring stack.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from infbench.errors import InfbenchError


class Check(BaseModel):
    name: str
    passed: bool
    evidence: dict[str, Any] = {}


class CheckFailed(InfbenchError):
    """A named check that stops the measurement, with its evidence (e.g. ``logits_shape``)."""

    def __init__(self, check: str, evidence: dict[str, Any]):
        self.check, self.evidence = check, evidence
        super().__init__(f"{check}: {evidence}")
