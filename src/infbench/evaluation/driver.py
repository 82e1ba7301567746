"""The accuracy gate's driver: prompts in, judged answers and accuracies out.

A runtime takes part through one function,

    generate_fn(prompts: list[str], max_new_tokens: int, stop: list[str]) -> list[Completion | str]

greedy completions (text after the prompt), one per prompt, with the generated token ids and the model's
log-prob of each where the runtime gives them (a bare string: text only). A runtime may stop early at a stop
sequence or not: every completion is cut at the first stop sequence here, so both give the same response.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from infbench.config.model import BENCHMARKS, AnswerSettings, Benchmark, SandboxSettings
from infbench.errors import InfbenchError
from infbench.evaluation import judge, prompts
from infbench.evaluation.generation import Completion, GenerateFn
from infbench.evaluation.questions import Question, QuestionSet, load_questions
from infbench.evaluation.registry import spec
from infbench.evaluation.results import (
    AnswerResults,
    BenchmarkAccuracy,
    GateResult,
    ItemRecord,
    read_json,
)
from infbench.hashing import sha256_text
from infbench.sandbox.judge import Outcome, run_case
from infbench.sandbox.launch import isolation

log = logging.getLogger(__name__)


class AnswerRuntimeError(InfbenchError):
    """The runtime's ``generate_fn`` broke its contract."""


class AnswerMismatchError(InfbenchError):
    """Two results were not made with the same questions and settings."""


def _generate(
    generate_fn: GenerateFn, prompt_list: list[str], max_new_tokens: int, stop: list[str], batch_size: int, label: str
) -> list[Completion]:
    completions: list[Completion] = []
    for start in range(0, len(prompt_list), batch_size):
        batch = prompt_list[start : start + batch_size]
        out = generate_fn(batch, max_new_tokens, stop)
        if (
            not isinstance(out, list)
            or len(out) != len(batch)
            or not all(isinstance(c, (str, Completion)) for c in out)
        ):
            raise AnswerRuntimeError(
                f"generate_fn returned {type(out).__name__} of {len(out) if hasattr(out, '__len__') else '?'} "
                f"items for {len(batch)} prompts; expected a list of {len(batch)} completions"
            )
        completions.extend(Completion(text=c) if isinstance(c, str) else c for c in out)
        log.info("%s: %d/%d generated", label, len(completions), len(prompt_list))
    return completions


def _judge_humaneval(
    questions: tuple[Question, ...], responses: list[str], settings: AnswerSettings, sandbox: SandboxSettings
) -> list[Outcome]:
    """Each program through :func:`infbench.sandbox.judge.run_case`, ``humaneval.workers`` at once."""
    cfg = settings.humaneval

    def run(pair: tuple[Question, str]) -> Outcome:
        return run_case(judge.humaneval_case(*pair), timeout_s=cfg.timeout_s, memory_mb=cfg.memory_mb, sandbox=sandbox)

    with ThreadPoolExecutor(max_workers=cfg.workers) as pool:
        return list(pool.map(run, zip(questions, responses)))


def evaluate_benchmark(
    generate_fn: GenerateFn, qset: QuestionSet, settings: AnswerSettings, label: str = "", *, sandbox: SandboxSettings
) -> tuple[BenchmarkAccuracy, list[ItemRecord]]:
    """``sandbox``: how HumanEval programs are judged (bubblewrap, or unsandboxed where the config allows)."""
    bench = settings.benchmark(qset.benchmark)
    prompt_list = prompts.build_prompts(qset)
    completions = _generate(
        generate_fn,
        prompt_list,
        bench.max_new_tokens,
        list(bench.stop),
        settings.batch_size,
        f"{label} {qset.benchmark}",
    )
    responses = [judge.truncate_at_stop(c.text, bench.stop) for c in completions]
    judged_by = ""
    if spec(qset.benchmark).judged_by == "tests":
        outcomes = _judge_humaneval(qset.questions, responses, settings, sandbox)
        judged = [(None, o.status == "passed", o.detail) for o in outcomes]
        judged_by = isolation(outcomes[0].sandbox) if outcomes else ""
    else:
        judged = [(*judge.judge_text(q, r), "") for q, r in zip(qset.questions, responses)]
    items = [
        ItemRecord(
            benchmark=qset.benchmark,
            id=q.id,
            prompt_sha256=sha256_text(p),
            completion=c.text,
            response=r,
            extracted=extracted,
            correct=ok,
            detail=detail,
            tokens=c.tokens,
            logprobs=c.logprobs,
        )
        for q, p, c, r, (extracted, ok, detail) in zip(qset.questions, prompt_list, completions, responses, judged)
    ]
    n_correct = sum(item.correct for item in items)
    return BenchmarkAccuracy(
        benchmark=qset.benchmark,
        origin=qset.origin,
        n=len(items),
        n_correct=n_correct,
        accuracy=n_correct / len(items),
        judged_by=judged_by,
    ), items


def protocol_hash(items: list[ItemRecord], settings: AnswerSettings) -> str:
    """What the source and a candidate must share: items, prompts, token budgets, stop sequences."""
    generation = {b: [settings.benchmark(b).max_new_tokens, list(settings.benchmark(b).stop)] for b in BENCHMARKS}
    keyed = [[i.benchmark, i.id, i.prompt_sha256] for i in items]
    return sha256_text(json.dumps([generation, keyed]))


def evaluate(
    generate_fn: GenerateFn,
    questions: dict[Benchmark, QuestionSet],
    settings: AnswerSettings,
    label: str = "",
    *,
    sandbox: SandboxSettings,
) -> AnswerResults:
    """Generate, judge and score every benchmark; ``A`` = the mean of the three accuracies."""
    missing = [b for b in BENCHMARKS if b not in questions]
    if missing:
        raise ValueError(f"question sets missing for {', '.join(missing)}")
    start = time.perf_counter()
    accuracies, items = [], []
    for benchmark in BENCHMARKS:
        acc, its = evaluate_benchmark(generate_fn, questions[benchmark], settings, label, sandbox=sandbox)
        accuracies.append(acc)
        items.extend(its)
    return AnswerResults(
        label=label,
        settings=settings,
        protocol_sha256=protocol_hash(items, settings),
        benchmarks=accuracies,
        mean_accuracy=sum(a.accuracy for a in accuracies) / len(accuracies),
        items=items,
        wall_s=time.perf_counter() - start,
    )


def gate(candidate: AnswerResults, reference: AnswerResults, rho: float) -> GateResult:
    """``A(a) >= rho * A(p)``; refuses results made with different questions or generation settings."""
    if candidate.protocol_sha256 != reference.protocol_sha256:
        raise AnswerMismatchError(
            f"answer results of '{candidate.label}' and reference '{reference.label}' were made with different "
            "questions or generation settings (protocol_sha256 differs); recompute one of them"
        )
    threshold = rho * reference.mean_accuracy
    # Accuracies are means of counts: allow float rounding, so that equality passes.
    return GateResult(
        candidate_accuracy=candidate.mean_accuracy,
        reference_accuracy=reference.mean_accuracy,
        rho=rho,
        threshold=threshold,
        passed=candidate.mean_accuracy >= threshold - 1e-12,
        per_benchmark={b: (candidate.accuracy(b), reference.accuracy(b)) for b in BENCHMARKS},
    )


def gate_candidate(
    generate_fn: GenerateFn,
    settings: AnswerSettings,
    reference_json: str | Path,
    label: str,
    *,
    question_seed: int,
    sandbox: SandboxSettings,
) -> tuple[AnswerResults, GateResult]:
    """Evaluate a candidate on the source's questions (drawn by ``question_seed``, as the reference's were)
    and gate it against the frozen ``A(p)`` file."""
    reference = read_json(reference_json)
    candidate = evaluate(
        generate_fn, load_questions(settings, seed=question_seed), settings, label=label, sandbox=sandbox
    )
    return candidate, gate(candidate, reference, settings.rho)
