"""The accuracy gate run through a submission's own greedy generation.

Prompts are tokenized with the source tokenizer (the package's is checked to
be identical) as the reference run did. The pipeline decides when generation
stops (the source's EOS ids, or the decoded text holding a stop sequence:
:mod:`infbench.evaluation.generation`) and tells the worker, and the driver
cuts completions at the first stop, as for A(p). HumanEval programs are
judged in sandboxes made with the package worker's own sandbox settings.

The verdict's accuracies come with their counts (correct, asked) per benchmark, the candidate's and the
reference's, so that the table can give each a binomial interval (:mod:`infbench.tables.compression`).
"""

from __future__ import annotations

from pathlib import Path

from infbench.config.model import AnswerSettings
from infbench.evaluation import driver
from infbench.evaluation.generation import checkpoint_generation_config, eos_ids, stream_generate_fn
from infbench.evaluation.results import AnswerResults, ItemRecord, read_json

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
    eos = eos_ids(tokenizer, checkpoint_generation_config(source_checkpoint))

    def gate(proc) -> dict:
        results, verdict = driver.gate_candidate(
            stream_generate_fn(proc, tokenizer, eos),
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
