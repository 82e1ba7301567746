"""A named check of a verdict and its evidence, for both tracks' records (a compression measurement, a server
submission's verification); the failure that stops a measurement at a named check.

Standard library and pydantic only: the sandboxed package worker imports it (through
:mod:`infbench.compression.harness.transport`) without the pipeline's scoring stack.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from infbench.errors import InfbenchError


class Check(BaseModel):
    """A named check of either track's record: passed or not, what it found in a line (a failed check's is
    the record's ``failure``) and its evidence (counts, examples, the cause of a failure)."""

    name: str
    passed: bool
    summary: str = ""
    evidence: dict[str, Any] = {}


class CheckFailed(InfbenchError):
    """A named check that stops the measurement, with its evidence (e.g. ``logits_shape``)."""

    def __init__(self, check: str, evidence: dict[str, Any]):
        self.check, self.evidence = check, evidence
        super().__init__(f"{check}: {evidence}")
