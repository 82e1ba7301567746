"""Prompts as lm-evaluation-harness writes them (plain text, no chat template).

- GSM8K: ``Question: {q}\\nAnswer:``; each exemplar followed by `` {worked
  answer}``, exemplars separated by a blank line (lm-eval ``gsm8k``,
  ``num_fewshot`` = shots).
- TriviaQA: ``Question: {q}?\\nAnswer:``, exemplars answered with their
  canonical value (lm-eval ``triviaqa``). A question's own trailing ``?`` is
  not doubled.
- HumanEval: the function prompt itself, 0-shot (lm-eval ``humaneval``).
"""

from __future__ import annotations

from infbench.compression.answers.questions import Question, QuestionSet

FEWSHOT_DELIMITER = "\n\n"
TARGET_DELIMITER = " "


def _qa_text(question: Question) -> str:
    if question.benchmark == "triviaqa":
        return f"Question: {question.text.rstrip().rstrip('?')}?\nAnswer:"
    return f"Question: {question.text}\nAnswer:"


def build_prompt(question: Question, fewshot: tuple[Question, ...] = ()) -> str:
    if question.benchmark == "humaneval":
        return question.text
    shots = [_qa_text(q) + TARGET_DELIMITER + q.target for q in fewshot]
    return FEWSHOT_DELIMITER.join([*shots, _qa_text(question)])


def build_prompts(qset: QuestionSet) -> list[str]:
    return [build_prompt(q, qset.fewshot) for q in qset.questions]
