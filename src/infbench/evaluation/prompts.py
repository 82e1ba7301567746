"""Prompts as lm-evaluation-harness writes them (plain text, no chat template), from each benchmark's
prompt spec (:mod:`.registry`, ``specs/<name>.yaml``).

A prompt is the few-shot exemplars, each its question's text, the target delimiter and its target (GSM8K
the worked answer, TriviaQA the canonical value), then the question's text, all joined by the few-shot
delimiter. GSM8K: ``Question: {q}\\nAnswer:``, 4-shot; TriviaQA: ``Question: {q}?\\nAnswer:`` (a
question's own trailing ``?`` is not doubled), 5-shot; HumanEval: the function prompt itself, 0-shot.
"""

from __future__ import annotations

from infbench.evaluation.questions import Question, QuestionSet
from infbench.evaluation.registry import PromptSpec, spec


def _text(prompt: PromptSpec, question: Question) -> str:
    text = question.text
    if prompt.question_rstrip is not None:
        text = text.rstrip().rstrip(prompt.question_rstrip)
    return prompt.question.format(question=text)


def build_prompt(question: Question, fewshot: tuple[Question, ...] = ()) -> str:
    prompt = spec(question.benchmark).prompt
    shots = [_text(prompt, q) + prompt.target_delimiter + q.target for q in fewshot]
    return prompt.fewshot_delimiter.join([*shots, _text(prompt, question)])


def build_prompts(qset: QuestionSet) -> list[str]:
    return [build_prompt(q, qset.fewshot) for q in qset.questions]
