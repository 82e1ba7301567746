"""The accuracy gate (PROTOCOL A5.2): the source's ``A(p)`` and a candidate's ``A(a)`` through the same code.

Both are greedy generations driven by the pipeline (:mod:`infbench.compression.harness.greedy`): prompts
tokenized with the source tokenizer (a package's is checked to be identical), prefilled in batches of
``answers.batch_size``, every token the argmax of the model's own logits, each row stopped by the pipeline at
the source's EOS ids or once its text holds a stop sequence (:func:`infbench.evaluation.generation.stopped`).
The source runs in this process through the ``hf`` runtime's runner (:class:`HFRunner`), a candidate in its
sandboxed worker; the questions, batch sizes and generation code are the same. The driver cuts completions at
the first stop and judges them (:mod:`infbench.evaluation.driver`); HumanEval programs are judged in sandboxes.

The verdict's accuracies come with their counts (correct, asked) per benchmark, the candidate's and the
reference's, so that the table can give each a binomial interval (:mod:`infbench.tables.compression`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict

from infbench import provenance
from infbench.compression.harness.greedy import greedy
from infbench.config.model import AnswerSettings, SandboxSettings
from infbench.evaluation import driver, prompts, results
from infbench.evaluation.generation import (
    Completion,
    GenerateFn,
    checkpoint_generation_config,
    completion_text,
    eos_ids,
    stopped,
)
from infbench.evaluation.questions import load_questions
from infbench.evaluation.results import AnswerResults, ItemRecord, read_json
from infbench.hashing import file_hashes, sha256_text

EVIDENCE_CHARS = 300  # of each response kept in the record (the whole one is judged)


def greedy_generate_fn(model, tokenizer, eos: list[int]) -> GenerateFn:
    """The driver's ``generate_fn`` over anything with ``prefill``/``step``: each call one batch."""

    def generate(prompts: list[str], max_new_tokens: int, stop: list[str]) -> list[Completion]:
        ended = stopped(tokenizer, stop, eos)
        rows = [tokenizer(p)["input_ids"] for p in prompts]
        out = greedy(model, rows, max_new_tokens, lambda row, tokens: ended(tokens))
        return [
            Completion(text=completion_text(tokenizer, g.tokens, eos), tokens=g.tokens, logprobs=g.logprobs)
            for g in out
        ]

    return generate


class GateJob(BaseModel):
    """What a candidate's accuracy gate needs: the settings, the frozen ``A(p)`` file, the source checkpoint
    (its tokenizer and EOS ids) and the seed the reference's questions were drawn by
    (:func:`infbench.compression.held_out.question_seed`)."""

    model_config = ConfigDict(frozen=True)

    answers: AnswerSettings
    reference_json: str
    source_checkpoint: str
    label: str
    question_seed: int


def item_evidence(item: ItemRecord) -> dict:
    """What the record keeps of one answer: its outcome and why (HumanEval: the judge's reason)."""
    return {
        "benchmark": item.benchmark,
        "id": item.id,
        "correct": item.correct,
        "detail": item.detail,
        "extracted": item.extracted,
        "response": item.response[:EVIDENCE_CHARS],
    }


def counts(answer_results: AnswerResults) -> dict[str, tuple[int, int]]:
    """(correct, asked) per benchmark."""
    return {b.benchmark: (b.n_correct, b.n) for b in answer_results.benchmarks}


def _tokenizer_and_eos(checkpoint: str | Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    return tokenizer, eos_ids(tokenizer, checkpoint_generation_config(checkpoint))


def gate(job: GateJob, model, sandbox: SandboxSettings) -> dict:
    """The candidate ``model`` (a package worker) on the reference's questions, gated against ``A(p)``."""
    tokenizer, eos = _tokenizer_and_eos(job.source_checkpoint)
    candidate, verdict = driver.gate_candidate(
        greedy_generate_fn(model, tokenizer, eos),
        job.answers,
        job.reference_json,
        job.label,
        question_seed=job.question_seed,
        sandbox=sandbox,
    )
    evidence = verdict.model_dump(mode="json")
    evidence["judged_by"] = {b.benchmark: b.judged_by for b in candidate.benchmarks if b.judged_by}
    evidence["items"] = [item_evidence(i) for i in candidate.items]
    return {
        "per_benchmark": {b.benchmark: b.accuracy for b in candidate.benchmarks},
        "mean": verdict.candidate_accuracy,
        "reference": verdict.reference_accuracy,
        "counts": counts(candidate),
        "reference_counts": counts(read_json(job.reference_json)),
        "passed": verdict.passed,
        "evidence": evidence,
    }


def source_answers(job: GateJob) -> tuple[list[str], list[list[int]], list[list[int]], list[list[float]]]:
    """The gate's items as the source answered them when ``A(p)`` was computed: (ids, prompt token ids, the
    source's greedy tokens, its log-prob of each), items whose answer is empty left out."""
    tokenizer, _ = _tokenizer_and_eos(job.source_checkpoint)
    reference = {(i.benchmark, i.id): i for i in read_json(job.reference_json).items}
    ids, prompt_ids, tokens, logprobs = [], [], [], []
    for benchmark, qset in load_questions(job.answers, seed=job.question_seed).items():
        for question, prompt in zip(qset.questions, prompts.build_prompts(qset)):
            item = reference[(benchmark, question.id)]
            if item.tokens:
                ids.append(f"{benchmark}/{question.id}")
                prompt_ids.append(tokenizer(prompt)["input_ids"])
                tokens.append(item.tokens)
                logprobs.append(item.logprobs)
    return ids, prompt_ids, tokens, logprobs


def compute_reference(
    source: str,
    checkpoint: str | Path,
    settings: AnswerSettings,
    out_json: str | Path,
    out_items: str | Path,
    *,
    question_seed: int,
    sandbox: SandboxSettings,
    secret_label: str | None = None,
    threads: int | None = None,
) -> AnswerResults:
    """The source's reference accuracy ``A(p)``, computed once and frozen: the checkpoint in ``answers.dtype``
    through the ``hf`` runtime's runner, on the questions ``question_seed`` draws. ``sandbox``: where its
    HumanEval programs are judged; ``secret_label``: the operator secret the seed came from, for the record."""
    from infbench.compression.runtimes.hf import HFRunner

    if threads:
        torch.set_num_threads(threads)
    tokenizer, eos = _tokenizer_and_eos(checkpoint)
    runner = HFRunner(Path(checkpoint), settings.device, dtype=settings.dtype)
    reference = driver.evaluate(
        greedy_generate_fn(runner, tokenizer, eos),
        load_questions(settings, seed=question_seed),
        settings,
        label=source,
        sandbox=sandbox,
    )
    reference.secret_label = secret_label
    weights = sha256_text("".join(f"{k}:{v}\n" for k, v in file_hashes(checkpoint).items()))
    reference.provenance = provenance.collect(
        {"source": source, **settings.model_dump(mode="json")}, {"checkpoint": weights}
    )
    results.write_items_parquet(out_items, reference)
    results.write_json(out_json, reference)
    return reference
