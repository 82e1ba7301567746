"""The accuracy gate run through a submission's own greedy generation.

Prompts are tokenized with the source tokenizer (the package's is checked to
be identical) as the reference run did. The pipeline decides when generation
stops (EOS, or the decoded text holding a stop sequence) and tells the worker,
and the driver cuts completions at the first stop, as for A(p). HumanEval programs are
judged in sandboxes made with the package worker's own sandbox settings.

The verdict's accuracies come with their counts (correct, asked) per benchmark, the candidate's and the
reference's, so that the table can give each a binomial interval (:mod:`infbench.tables.compression`).
"""

from __future__ import annotations

from pathlib import Path

from infbench.compression.answers import driver
from infbench.compression.answers.results import AnswerResults, ItemRecord, read_json
from infbench.config.model import AnswerSettings

EVIDENCE_CHARS = 300  # of each response kept in the record (the whole one is judged)


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


def stream_generate_fn(proc, tokenizer) -> driver.GenerateFn:
    """``generate_fn`` over anything with the worker's ``stream(ids, max_new_tokens, stop)`` (a
    :class:`~infbench.compression.client.SubmissionProcess`): one prompt at a time, stopped by the caller."""
    eos = tokenizer.eos_token_id
    eos_ids = [eos] if eos is not None else []

    def generate_fn(prompts: list[str], max_new_tokens: int, stop: list[str]) -> list[str]:
        texts = [s for s in stop if s]

        def stopped(tokens: list[int]) -> bool:
            if tokens[-1] in eos_ids:
                return True
            return bool(texts) and any(s in tokenizer.decode(tokens, skip_special_tokens=True) for s in texts)

        completions = []
        for prompt in prompts:
            tokens = proc.stream(tokenizer(prompt)["input_ids"], max_new_tokens, stop=stopped).tokens
            if eos_ids and eos_ids[0] in tokens:
                tokens = tokens[: tokens.index(eos_ids[0])]
            completions.append(tokenizer.decode(tokens, skip_special_tokens=True))
        return completions

    return generate_fn


def counts(results: AnswerResults) -> dict[str, tuple[int, int]]:
    """(correct, asked) per benchmark."""
    return {b.benchmark: (b.n_correct, b.n) for b in results.benchmarks}


def make_gate(
    answer_settings: AnswerSettings,
    reference_json: str | Path,
    source_checkpoint: str | Path,
    label: str,
    *,
    question_seed: int,
):
    """``question_seed``: the seed the reference's questions were drawn by (``held_out.question_seed``)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source_checkpoint)

    def gate(proc) -> dict:
        results, verdict = driver.gate_candidate(
            stream_generate_fn(proc, tokenizer),
            answer_settings,
            reference_json,
            label,
            question_seed=question_seed,
            sandbox=proc.sandbox_settings,
        )
        evidence = verdict.model_dump(mode="json")
        evidence["judged_by"] = {b.benchmark: b.judged_by for b in results.benchmarks if b.judged_by}
        evidence["items"] = [item_evidence(i) for i in results.items]
        return {
            "per_benchmark": {b.benchmark: b.accuracy for b in results.benchmarks},
            "mean": verdict.candidate_accuracy,
            "reference": verdict.reference_accuracy,
            "counts": counts(results),
            "reference_counts": counts(read_json(reference_json)),
            "passed": verdict.passed,
            "evidence": evidence,
        }

    return gate
