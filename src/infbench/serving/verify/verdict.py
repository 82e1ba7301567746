"""One submission verified end to end; the verification record.

Order: the directory's files (no link out of it, no special file: checked before any is read), spec,
requirements, launch from a fresh copy of the directory (made only after that check; mounted read-only at
/submission), held-out replays at the declared ``c`` (every final seed, the configured window), context
probes, EOS probes, held-out answers, server still alive; teardown; then the replay checks, fidelity and
far_context (reference model, after the server is down). Every failure (a link out of the directory, a bad
spec, a launch that fails, a port in use, a server that never becomes healthy or dies) becomes a failed
check naming the cause in the record, never an exception that stops other jobs.

The held-out replays' prompts (every id, and where the far-context carriers lie), probes, held-out
questions, fidelity suspects and the carriers checked are drawn with seeds derived from the operator's
secret (:mod:`infbench.operator_secret`); the record names it (``drawn_with``) and keeps its fingerprint
only: its value goes to the operator's file written once the whole round is over
(:func:`infbench.operator_secret.write_release`).
"""

from __future__ import annotations

import contextlib
import functools
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from infbench import atomic, provenance
from infbench.checks import Check
from infbench.compression.submission import SubmissionError, package_entries
from infbench.config.model import (
    AnswerSettings,
    SandboxSettings,
    ServingCore,
    VerifySettings,
)
from infbench.operator_secret import OperatorSecret
from infbench.sandbox.launch import SandboxRecord
from infbench.serving import replay, replay_job, servers, workload
from infbench.serving.verify import (
    answers,
    far_context,
    fidelity,
    probes,
    reference,
    replay_checks,
    submission,
)
from infbench.serving.verify.record import (
    SeedReplay,
    VerificationRecord,
    in_documented_order,
)
from infbench.serving.verify.source_text import SourceText, TokenizerUnavailable


@contextlib.contextmanager
def _phase(phases: dict[str, float], name: str):
    """Seconds spent in ``name`` (launch, replays, each check, teardown), added to ``phases``."""
    t = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - t


def _guard(name: str, fn: Callable[[], Check], phases: dict[str, float] | None = None) -> Check:
    with _phase({} if phases is None else phases, name):
        try:
            return fn()
        except Exception as exc:  # a check that cannot run fails, naming why
            return Check(
                name=name,
                passed=False,
                summary=f"check could not run: {type(exc).__name__}: {exc}"[:1000],
                evidence={"traceback": traceback.format_exc()[-3000:]},
            )


def _unavailable(name: str, cause: str) -> Check:
    return Check(name=name, passed=False, summary=cause)


def verify(
    directory: str,
    serving: ServingCore,
    settings: VerifySettings,
    answer_settings: AnswerSettings,
    model_dir: str,
    gguf: str,
    reference_path: str,
    sessions_path: str,
    out_dir: str,
    record_path: str,
    server_log: str,
    sandbox: SandboxSettings,
    secret: OperatorSecret,
    load_reference_model: Callable[[], tuple[Any, Any]] | None = None,
) -> VerificationRecord:
    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = Path(directory).name
    checks: list[Check] = []
    replays: list[SeedReplay] = []
    frames: list[tuple[int, pd.DataFrame]] = []
    eos_completions: list[tuple[list[int], probes.Completion]] = []
    context_completions: list[tuple[list[int], probes.Completion]] = []
    command: list[str] = []
    isolation: list[SandboxRecord] = []
    phases: dict[str, float] = {}
    prompts: dict[int, workload.PromptBuilder] = {}  # each final seed's held-out prompts, as sent
    sub = None
    inputs: dict[str, str] = {}

    def finish() -> VerificationRecord:
        ordered = in_documented_order(checks)
        failed = next((c for c in ordered if not c.passed), None)
        record = VerificationRecord(
            submission=name,
            directory=str(directory),
            spec=sub.model_dump(mode="json") if sub else None,
            concurrency=sub.concurrency if sub else None,
            verified=failed is None and bool(checks),
            failed_check=failed and failed.name,
            failure=failed and failed.summary,
            checks=ordered,
            replays=replays,
            server_log=str(server_log),
            command=command,
            sandbox=isolation[0] if isolation else None,
            wall_s=time.perf_counter() - t0,
            phase_s=phases,
            drawn_with=secret.label,
            operator_secret=secret.public(),
            provenance=provenance.collect(
                {
                    "submission": name,
                    "serving": serving.model_dump(mode="json"),
                    "verification": settings.model_dump(mode="json"),
                    "operator_secret": secret.public(),
                },
                inputs,
            ),
        )
        atomic.write_json(record_path, record.model_dump(mode="json"))
        return record

    try:  # before any file of the submission is read: no link out of it, no special file (the package rule)
        entries = package_entries(directory)
    except SubmissionError as exc:
        checks.append(Check(name="submission_files", passed=False, summary=str(exc)))
        return finish()
    checks.append(
        Check(
            name="submission_files",
            passed=True,
            summary=f"{len(entries)} names, none a link out of the directory or special",
        )
    )
    own_files = [str(e.path) for e in entries if e.inode is not None]  # regular files (links not followed)
    inputs.update(replay_job.input_hashes(sessions_path, reference_path, *own_files))
    try:
        sub = submission.load(directory)
    except Exception as exc:
        checks.append(Check(name="submission_spec", passed=False, summary=str(exc)))
        return finish()
    source = serving.source
    if sub.model != source:
        checks.append(
            Check(
                name="submission_spec",
                passed=False,
                summary=f"{submission.spec_path(directory)}: field 'model': serves '{sub.model}', "
                f"the deployment's model is '{source}'",
            )
        )
        return finish()
    checks.append(
        Check(
            name="submission_spec",
            passed=True,
            summary="spec valid",
            evidence={"spec": str(submission.spec_path(directory))},
        )
    )
    dep = serving.deployment
    token_range = serving.workload.token_id_range
    probe_timeout = max(serving.replay.request_timeout_s, settings.probe_timeout_s)
    model_name = dep.name

    try:
        text: SourceText | None = SourceText.load(model_dir)
        text_cause = ""
    except TokenizerUnavailable as exc:
        text, text_cause = None, str(exc)

    with submission.workspace(directory) as copy:  # the server runs in a fresh copy, from /submission
        workdir = str(copy)
        missing = submission.missing_requirements(sub, submission.python(), workdir, sandbox)
        checks.append(
            Check(
                name="requirements",
                passed=not missing,
                summary=(
                    "all required modules importable"
                    if not missing
                    else f"not importable: {', '.join(missing)} (field 'requires'; "
                    "the verifier never installs anything)"
                ),
                evidence={"requires": sub.requires, "missing": missing},
            )
        )
        if missing:
            return finish()
        # absolute: the server runs in its own directory, not where the pipeline runs
        launch = servers.LaunchVars.for_serving(
            serving, str(Path(model_dir).resolve()), str(Path(gguf).resolve()) if gguf else ""
        )
        try:
            started = time.perf_counter()
            with submission.running(sub, launch, workdir, server_log, sandbox, cuda=dep.accelerator == "gpu") as server:
                phases["launch"] = time.perf_counter() - started
                command = server.command
                isolation.append(server.sandbox)
                checks.append(
                    Check(
                        name="launch",
                        passed=True,
                        summary=f"healthy at {server.base_url}",
                        evidence={"workdir": workdir, "command": command},
                    )
                )
                ref = reference.read(reference_path)
                if ref.drawn_with.get("fingerprint") != secret.fingerprint:
                    raise ValueError(
                        f"{reference_path} was drawn with operator secret {ref.drawn_with}, this job "
                        f"holds {secret.public()}: rerun rule serving_verification_reference"
                    )
                sessions = workload.load(sessions_path)
                for seed in serving.seeds.final:
                    st = replay.ReplaySettings.for_serving(
                        serving,
                        server.base_url,
                        sub.concurrency,
                        seed,
                        sub.request_fields,
                        prompt_seed=workload.held_out_prompt_seed(secret, seed),
                    )
                    prompts[seed] = st.prompt_builder()
                    with _phase(phases, "replays"):
                        recs = replay.run(workload.draw(sessions, seed), st)
                    path = str(out / f"seed{seed}.parquet")
                    frame = replay.write_records(recs, path)
                    frames.append((seed, frame))
                    replays.append(
                        SeedReplay(
                            seed=seed,
                            records=path,
                            requests=len(frame),
                            score=replay_job.score_frame(frame, serving, None),
                        )
                    )

                def context_check():
                    result, comps = probes.context_probes(
                        server.base_url,
                        model_name,
                        dep.context_limit,
                        settings.context_probes,
                        settings.context_probe_output_tokens,
                        token_range,
                        probe_timeout,
                        secret,
                        sub.request_fields,
                    )
                    context_completions.extend(comps)
                    return result

                checks.append(_guard("context_probes", context_check, phases))

                def eos_check():
                    if settings.eos_probes and not ref.eos_probes:  # nothing to test natural stopping with
                        return Check(
                            name="natural_stopping",
                            passed=False,
                            summary=f"the reference reached EOS from none of "
                            f"{ref.eos_candidates_tried} candidate prompts: no EOS probe to "
                            f"send (raise serving.verification.eos_candidates)",
                        )
                    result, comps = probes.eos_probes(
                        server.base_url,
                        model_name,
                        [p.model_dump() for p in ref.eos_probes],
                        ref.eos_token_ids,
                        settings.eos_max_tokens,
                        probe_timeout,
                        sub.request_fields,
                    )
                    eos_completions.extend(zip([p.prompt for p in ref.eos_probes], comps))
                    return result

                checks.append(_guard("natural_stopping", eos_check, phases))
                checks.append(
                    _guard(
                        "held_out_answers",
                        lambda: (
                            answers.held_out_answers(
                                server.base_url,
                                model_name,
                                ref,
                                answer_settings,
                                settings,
                                probe_timeout,
                                text,
                                secret,
                                sub.request_fields,
                            )
                            if text
                            else _unavailable("held_out_answers", text_cause)
                        ),
                        phases,
                    )
                )
                alive = server.alive()
                checks.append(
                    Check(
                        name="server_alive",
                        passed=alive,
                        summary="server still running after the checks"
                        if alive
                        else f"server exited with {server.returncode()} during the checks; log {server_log}",
                        evidence={"returncode": server.returncode()},
                    )
                )
                stopping = time.perf_counter()
            phases["teardown"] = time.perf_counter() - stopping
        except submission.LaunchError as exc:
            isolation.extend([exc.sandbox] if exc.sandbox else [])
            checks.append(Check(name="launch", passed=False, summary=str(exc)[:3000]))
            return finish()

    records = (
        pd.concat([f for _, f in frames], ignore_index=True)
        if frames
        else pd.DataFrame(columns=list(replay.RequestRecord.model_fields))
    )
    checks.append(_guard("complete_prompts", lambda: replay_checks.complete_prompts(records), phases))
    checks.append(_guard("exact_output_lengths", lambda: replay_checks.exact_output_lengths(records), phases))
    checks.append(
        _guard(
            "streaming_consistency",
            lambda: (
                replay_checks.streaming_consistency(records, text)
                if text
                else _unavailable("streaming_consistency", text_cause)
            ),
            phases,
        )
    )
    checks.append(
        _guard(
            "session_progress",
            lambda: replay_checks.session_progress(records, serving.replay.warmup_s + serving.replay.window_s),
            phases,
        )
    )

    @functools.cache
    def model():  # the reference, loaded once for fidelity and far_context
        load = load_reference_model or (lambda: reference.load_model(model_dir, settings.reference_dtype))
        return load()[0]

    @functools.cache
    def replayed() -> list[fidelity.Candidate]:  # shared, so a continuation both checks score is scored once
        return fidelity.replay_candidates(frames, sessions, prompts, serving.replay.warmup_s, serving.replay.window_s)

    def fidelity_check():
        probed = [
            fidelity.fixed(f"EOS probe {i}", prompt, c.ids) for i, (prompt, c) in enumerate(eos_completions) if c.ids
        ]
        probed += [
            fidelity.fixed(f"context probe {i}", prompt, c.ids, kind="long prompt (context probe)")
            for i, (prompt, c) in enumerate(context_completions)
            if c.ids
        ]
        rng = np.random.default_rng(secret.seed("serving.fidelity", name))
        return fidelity.fidelity(model(), probed, replayed(), set(ref.eos_token_ids), settings, rng, secret.label)

    checks.append(_guard("fidelity", fidelity_check, phases))
    checks.append(
        _guard(
            "far_context",
            lambda: far_context.far_context(
                model(),
                replayed(),
                settings,
                np.random.default_rng(secret.seed("serving.far_context", name)),
                secret.label,
            ),
            phases,
        )
    )
    return finish()


def run_job(
    directory: str,
    serving: ServingCore,
    settings: VerifySettings,
    answer_settings: AnswerSettings,
    model_dir: str,
    gguf: str,
    reference_path: str,
    sessions_path: str,
    out_dir: str,
    record_path: str,
    server_log: str,
    sandbox: SandboxSettings,
    secret: OperatorSecret,
    threads: int | None = None,
) -> VerificationRecord:
    """The rule's entry point: a record is written whatever happens (an internal error names itself)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    try:
        return verify(
            directory,
            serving,
            settings,
            answer_settings,
            model_dir,
            gguf,
            reference_path,
            sessions_path,
            out_dir,
            record_path,
            server_log,
            sandbox,
            secret,
        )
    except Exception as exc:
        check = Check(
            name="verifier",
            passed=False,
            summary=f"verification crashed: {type(exc).__name__}: {exc}",
            evidence={"traceback": traceback.format_exc()[-3000:]},
        )
        record = VerificationRecord(
            submission=Path(directory).name,
            directory=str(directory),
            spec=None,
            concurrency=None,
            verified=False,
            failed_check="verifier",
            failure=check.summary,
            checks=[check],
            replays=[],
            server_log=str(server_log),
            command=[],
            wall_s=0.0,
            phase_s={},
            drawn_with=secret.label,
            operator_secret=secret.public(),
            provenance=provenance.collect(
                {
                    "submission": Path(directory).name,
                    "serving": serving.model_dump(mode="json"),
                    "verification": settings.model_dump(mode="json"),
                    "operator_secret": secret.public(),
                }
            ),
        )
        atomic.write_json(record_path, record.model_dump(mode="json"))
        return record
