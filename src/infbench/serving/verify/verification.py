"""One submission's verification as it goes: the job it was given (:class:`VerifyJob`) and what it found so far
(:class:`Verification`: the checks, the held-out replays, the server's command and isolation, the seconds of
each phase), from which its record is built, once (:meth:`Verification.record`)."""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from infbench import atomic, provenance
from infbench.checks import Check
from infbench.config.model import AnswerSettings, SandboxSettings, ServingCore, VerifySettings
from infbench.operator_secret import OperatorSecret
from infbench.sandbox.launch import SandboxRecord
from infbench.serving.verify.record import SeedReplay, VerificationRecord, in_documented_order
from infbench.serving.verify.submission import ServerSubmission


class VerifyJob(BaseModel):
    """What one ``serving_verify`` job is given: the submission, the sections it is verified under, its inputs
    and where its outputs go."""

    model_config = ConfigDict(frozen=True)

    directory: str  # the submission
    serving: ServingCore
    verification: VerifySettings
    answers: AnswerSettings
    sandbox: SandboxSettings
    secret: OperatorSecret
    model_dir: str  # the source checkpoint (transformers)
    gguf: str  # the source as GGUF ("" when the deployment has none)
    reference: str  # the source's verification reference (serving.verify.reference)
    sessions: str  # the workload's sessions
    replays_dir: str  # the held-out replays' request records, one parquet file per final seed
    record: str  # the verification record (JSON)
    server_log: str

    @property
    def name(self) -> str:
        return Path(self.directory).name


@dataclass
class Verification:
    """What the verification of ``job`` found so far."""

    job: VerifyJob
    started: float = field(default_factory=time.perf_counter)
    checks: list[Check] = field(default_factory=list)
    replays: list[SeedReplay] = field(default_factory=list)
    spec: ServerSubmission | None = None
    command: list[str] = field(default_factory=list)
    sandbox: SandboxRecord | None = None  # how the server was isolated
    phases: dict[str, float] = field(default_factory=dict)  # seconds: launch, replays, each check, teardown
    inputs: dict[str, str] = field(default_factory=dict)  # the input files' hashes, for the provenance

    def add(self, check: Check) -> bool:
        """Record ``check``; whether it passed."""
        self.checks.append(check)
        return check.passed

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Seconds spent in ``name``, added to its phase."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t

    def guard(self, name: str, check: Callable[[], Check]) -> None:
        """Run ``check`` as phase ``name``; a check that cannot run fails, naming why."""
        with self.phase(name):
            try:
                result = check()
            except Exception as exc:
                result = Check(
                    name=name,
                    passed=False,
                    summary=f"check could not run: {type(exc).__name__}: {exc}"[:1000],
                    evidence={"traceback": traceback.format_exc()[-3000:]},
                )
        self.add(result)

    def record(self) -> VerificationRecord:
        """The record of what was found (checks in the documented order, the first failure named), written."""
        job = self.job
        ordered = in_documented_order(self.checks)
        failed = next((c for c in ordered if not c.passed), None)
        record = VerificationRecord(
            submission=job.name,
            directory=str(job.directory),
            spec=self.spec.model_dump(mode="json") if self.spec else None,
            concurrency=self.spec.concurrency if self.spec else None,
            verified=failed is None and bool(self.checks),
            failed_check=failed and failed.name,
            failure=failed and failed.summary,
            checks=ordered,
            replays=self.replays,
            server_log=str(job.server_log),
            command=self.command,
            sandbox=self.sandbox,
            wall_s=time.perf_counter() - self.started,
            phase_s=self.phases,
            drawn_with=job.secret.label,
            operator_secret=job.secret.public(),
            provenance=provenance.collect(
                {
                    "submission": job.name,
                    "serving": job.serving.model_dump(mode="json"),
                    "verification": job.verification.model_dump(mode="json"),
                    "operator_secret": job.secret.public(),
                },
                self.inputs,
            ),
        )
        atomic.write_json(job.record, record.model_dump(mode="json"))
        return record
