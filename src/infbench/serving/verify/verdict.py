"""One submission verified end to end.

Order: the directory's files (no link out of it, no special file: checked before any is read), spec,
requirements, launch from a fresh copy of the directory (made only after that check; mounted read-only at
/submission), held-out replays at the declared ``c`` (every final seed, the configured window), context
probes, EOS probes, held-out answers, server still alive; teardown; then the replay checks, fidelity and
far_context (reference model, after the server is down). Every failure (a link out of the directory, a bad
spec, a launch that fails, a port in use, a server that never becomes healthy or dies) becomes a failed
check naming the cause in the record (:mod:`.verification` builds it), never an exception that stops other
jobs.

The held-out replays' prompts (every id, and where the far-context carriers lie), probes, held-out
questions, fidelity suspects and the carriers checked are drawn with seeds derived from the operator's
secret (:mod:`infbench.operator_secret`); the record names it (``drawn_with``) and keeps its fingerprint
only: its value goes to the operator's file written once the whole round is over
(:func:`infbench.operator_secret.write_release`).
"""

from __future__ import annotations

import functools
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from infbench.checks import Check
from infbench.package_files import PackageFilesError, package_entries
from infbench.serving import replay, replay_job, replay_settings, request_records, servers, workload
from infbench.serving.sessions import Session
from infbench.serving.verify import (
    answers,
    far_context,
    fidelity,
    probes,
    reference,
    replay_checks,
    submission,
)
from infbench.serving.verify.record import SeedReplay, VerificationRecord
from infbench.serving.verify.source_text import SourceText, TokenizerUnavailable
from infbench.serving.verify.verification import Verification, VerifyJob
from infbench.vllm_env import VllmEnvironmentMissing


@dataclass
class Served:
    """What the server answered while it was up, for the checks made after teardown."""

    ref: reference.VerificationReference
    sessions: list[Session]
    frames: list[tuple[int, pd.DataFrame]] = field(default_factory=list)  # each final seed's request records
    prompts: dict[int, workload.PromptBuilder] = field(default_factory=dict)  # each final seed's, as sent
    eos: list[tuple[list[int], probes.Completion]] = field(default_factory=list)  # EOS probes, answered
    context: list[tuple[list[int], probes.Completion]] = field(default_factory=list)  # context probes, answered

    def records(self) -> pd.DataFrame:
        """Every held-out replay's request records."""
        if not self.frames:
            return pd.DataFrame(columns=list(request_records.RequestRecord.model_fields))
        return pd.concat([f for _, f in self.frames], ignore_index=True)


@dataclass(frozen=True)
class Text:
    """The source tokenizer's text of token ids, or why it could not be loaded."""

    source: SourceText | None
    cause: str = ""

    @classmethod
    def load(cls, model_dir: str) -> Text:
        try:
            return cls(SourceText.load(model_dir))
        except TokenizerUnavailable as exc:
            return cls(None, str(exc))

    def unavailable(self, name: str) -> Check:
        return Check(name=name, passed=False, summary=self.cause)


def _submission(v: Verification) -> submission.ServerSubmission | None:
    """The directory's files, then its spec; None once one of them fails."""
    job = v.job
    try:  # before any file of the submission is read: no link out of it, no special file (the package rule)
        entries = package_entries(job.directory)
    except PackageFilesError as exc:
        v.add(Check(name="submission_files", passed=False, summary=str(exc)))
        return None
    v.add(
        Check(
            name="submission_files",
            passed=True,
            summary=f"{len(entries)} names, none a link out of the directory or special",
        )
    )
    own_files = [str(e.path) for e in entries if e.inode is not None]  # regular files (links not followed)
    v.inputs.update(replay_job.input_hashes(job.sessions, job.reference, *own_files))
    try:
        sub = submission.load(job.directory)
    except Exception as exc:
        v.add(Check(name="submission_spec", passed=False, summary=str(exc)))
        return None
    v.spec = sub
    source = job.serving.source
    if sub.model != source:
        v.add(
            Check(
                name="submission_spec",
                passed=False,
                summary=f"{submission.spec_path(job.directory)}: field 'model': serves '{sub.model}', "
                f"the deployment's model is '{source}'",
            )
        )
        return None
    v.add(
        Check(
            name="submission_spec",
            passed=True,
            summary="spec valid",
            evidence={"spec": str(submission.spec_path(job.directory))},
        )
    )
    return sub


def _requirements(v: Verification, sub: submission.ServerSubmission, workdir: str) -> bool:
    missing = submission.missing_requirements(sub, workdir, v.job.sandbox)
    return v.add(
        Check(
            name="requirements",
            passed=not missing,
            summary=(
                "all required modules importable"
                if not missing
                else f"not importable: {', '.join(missing)} (field 'requires'; the verifier never installs anything)"
            ),
            evidence={"requires": sub.requires, "missing": missing},
        )
    )


def _reference(job: VerifyJob) -> reference.VerificationReference:
    ref = reference.read(job.reference)
    if ref.drawn_with.get("fingerprint") != job.secret.fingerprint:
        raise ValueError(
            f"{job.reference} was drawn with operator secret {ref.drawn_with}, this job "
            f"holds {job.secret.public()}: rerun rule serving_verification_reference"
        )
    return ref


def _replay_held_out(
    v: Verification, sub: submission.ServerSubmission, server: submission.Running, served: Served
) -> None:
    """Every final seed's held-out replay at the declared concurrency."""
    job = v.job
    for seed in job.serving.seeds.final:
        settings = replay_settings.ReplaySettings.for_serving(
            job.serving,
            server.base_url,
            sub.concurrency,
            seed,
            sub.request_fields,
            prompt_seed=workload.held_out_prompt_seed(job.secret, seed),
        )
        served.prompts[seed] = settings.prompt_builder()
        with v.phase("replays"):
            recs = replay.run(workload.draw(served.sessions, seed), settings)
        path = str(Path(job.replays_dir) / f"seed{seed}.parquet")
        frame = request_records.write_records(recs, path)
        served.frames.append((seed, frame))
        v.replays.append(
            SeedReplay(
                seed=seed, records=path, requests=len(frame), score=replay_job.score_frame(frame, job.serving, None)
            )
        )


def _context_probes(job: VerifyJob, sub: submission.ServerSubmission, base_url: str, served: Served) -> Check:
    settings, dep = job.verification, job.serving.deployment
    result, completions = probes.context_probes(
        base_url,
        dep.name,
        dep.context_limit,
        settings.context_probes,
        settings.context_probe_output_tokens,
        job.serving.workload.token_id_range,
        _probe_timeout(job),
        job.secret,
        sub.request_fields,
    )
    served.context.extend(completions)
    return result


def _eos_probes(job: VerifyJob, sub: submission.ServerSubmission, base_url: str, served: Served) -> Check:
    ref = served.ref
    if job.verification.eos_probes and not ref.eos_probes:  # nothing to test natural stopping with
        return Check(
            name="natural_stopping",
            passed=False,
            summary=f"the reference reached EOS from none of {ref.eos_candidates_tried} candidate prompts: no "
            f"EOS probe to send (raise serving.verification.eos_candidates)",
        )
    result, completions = probes.eos_probes(
        base_url,
        job.serving.deployment.name,
        [p.model_dump() for p in ref.eos_probes],
        ref.eos_token_ids,
        job.verification.eos_max_tokens,
        _probe_timeout(job),
        sub.request_fields,
    )
    served.eos.extend(zip([p.prompt for p in ref.eos_probes], completions))
    return result


def _held_out_answers(
    job: VerifyJob, sub: submission.ServerSubmission, base_url: str, served: Served, text: Text
) -> Check:
    if text.source is None:
        return text.unavailable("held_out_answers")
    return answers.held_out_answers(
        base_url,
        job.serving.deployment.name,
        served.ref,
        job.answers,
        job.verification,
        _probe_timeout(job),
        text.source,
        job.secret,
        sub.request_fields,
    )


def _probe_timeout(job: VerifyJob) -> float:
    return max(job.serving.replay.request_timeout_s, job.verification.probe_timeout_s)


def _while_up(v: Verification, sub: submission.ServerSubmission, workdir: str, text: Text) -> Served:
    """Launch the server; the held-out replays and the checks made while it is up; teardown."""
    job = v.job
    # absolute: the server runs in its own directory, not where the pipeline runs
    launch = servers.LaunchVars.for_serving(
        job.serving, str(Path(job.model_dir).resolve()), str(Path(job.gguf).resolve()) if job.gguf else ""
    )
    started = time.perf_counter()
    dep = job.serving.deployment
    cuda = dep.accelerator == "gpu"
    with submission.running(
        sub, launch, workdir, job.server_log, job.sandbox, cuda=cuda, charged_cpus=dep.devices * dep.cpus_per_device
    ) as server:
        v.phases["launch"] = time.perf_counter() - started
        v.command, v.sandbox = server.command, server.sandbox
        v.add(
            Check(
                name="launch",
                passed=True,
                summary=f"healthy at {server.base_url}",
                evidence={"workdir": workdir, "command": server.command},
            )
        )
        served = Served(ref=_reference(job), sessions=workload.load(job.sessions))
        _replay_held_out(v, sub, server, served)
        v.guard("context_probes", lambda: _context_probes(job, sub, server.base_url, served))
        v.guard("natural_stopping", lambda: _eos_probes(job, sub, server.base_url, served))
        v.guard("held_out_answers", lambda: _held_out_answers(job, sub, server.base_url, served, text))
        alive = server.alive()
        v.add(
            Check(
                name="server_alive",
                passed=alive,
                summary="server still running after the checks"
                if alive
                else f"server exited with {server.returncode()} during the checks; log {job.server_log}",
                evidence={"returncode": server.returncode()},
            )
        )
        stopping = time.perf_counter()
    v.phases["teardown"] = time.perf_counter() - stopping
    return served


def _after_teardown(v: Verification, served: Served, text: Text) -> None:
    """The replay checks, then fidelity and far_context under the reference model (loaded once, for both)."""
    job = v.job
    records = served.records()
    v.guard("complete_prompts", lambda: replay_checks.complete_prompts(records))
    v.guard("exact_output_lengths", lambda: replay_checks.exact_output_lengths(records))
    v.guard(
        "streaming_consistency",
        lambda: (
            replay_checks.streaming_consistency(records, text.source)
            if text.source
            else text.unavailable("streaming_consistency")
        ),
    )
    window_end = job.serving.replay.warmup_s + job.serving.replay.window_s
    v.guard("session_progress", lambda: replay_checks.session_progress(records, window_end))

    model = functools.cache(lambda: reference.load_model(job.model_dir, job.verification.reference_dtype)[0])
    # shared, so that a continuation both checks score is scored once
    replayed = functools.cache(
        lambda: fidelity.replay_candidates(
            served.frames, served.sessions, served.prompts, job.serving.replay.warmup_s, job.serving.replay.window_s
        )
    )
    v.guard("fidelity", lambda: _fidelity(job, served, model(), replayed()))
    v.guard(
        "far_context",
        lambda: far_context.far_context(
            model(),
            replayed(),
            job.verification,
            np.random.default_rng(job.secret.seed("serving.far_context", job.name)),
            job.secret.label,
        ),
    )


def _fidelity(job: VerifyJob, served: Served, model, replayed: list[fidelity.Candidate]) -> Check:
    probed = [fidelity.fixed(f"EOS probe {i}", prompt, c.ids) for i, (prompt, c) in enumerate(served.eos) if c.ids]
    probed += [
        fidelity.fixed(f"context probe {i}", prompt, c.ids, kind="long prompt (context probe)")
        for i, (prompt, c) in enumerate(served.context)
        if c.ids
    ]
    rng = np.random.default_rng(job.secret.seed("serving.fidelity", job.name))
    return fidelity.fidelity(
        model, probed, replayed, set(served.ref.eos_token_ids), job.verification, rng, job.secret.label
    )


def verify(job: VerifyJob) -> VerificationRecord:
    v = Verification(job)
    Path(job.replays_dir).mkdir(parents=True, exist_ok=True)
    sub = _submission(v)
    if sub is None:
        return v.record()
    text = Text.load(job.model_dir)
    with submission.workspace(job.directory) as copy:  # the server runs in a fresh copy, from /submission
        if not _requirements(v, sub, str(copy)):
            return v.record()
        try:
            served = _while_up(v, sub, str(copy), text)
        except submission.LaunchError as exc:
            v.sandbox = v.sandbox or exc.sandbox
            v.add(Check(name="launch", passed=False, summary=str(exc)[:3000]))
            return v.record()
    _after_teardown(v, served, text)
    return v.record()


def run_job(job: VerifyJob, threads: int | None = None) -> VerificationRecord:
    """The rule's entry point: a record is written whatever happens (an internal error names itself), unless the
    vLLM environment a submission needs is not installed (the job stops naming it)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    try:
        return verify(job)
    except VllmEnvironmentMissing:
        raise  # the machine's setup, not the submission: no verdict
    except Exception as exc:
        crashed = Verification(job)
        crashed.add(
            Check(
                name="verifier",
                passed=False,
                summary=f"verification crashed: {type(exc).__name__}: {exc}",
                evidence={"traceback": traceback.format_exc()[-3000:]},
            )
        )
        return crashed.record()
