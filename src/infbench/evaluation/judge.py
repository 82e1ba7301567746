"""Answer extraction and comparison (PROTOCOL A5.2, ANCHORS "Answer benchmarks"), as each benchmark's
answer spec says (:mod:`.registry`, ``specs/<name>.yaml``).

- Stop sequences cut a completion at the earliest occurrence of any of them
  (lm-eval's ``until``), whether or not the runtime stopped there itself.
- A benchmark judged by its answer: the answer is the spec's ``extract`` match (GSM8K, lm-eval's
  ``flexible-extract``: the last number) or the whole response (TriviaQA), normalised by the spec's
  steps (GSM8K: lm-eval's ``regexes_to_ignore``; TriviaQA: the official ``normalize_answer``); it is
  correct iff it is not empty and equals a gold answer normalised the same way.
- HumanEval (judged by tests): the candidate program is prompt + completion; the problem's
  prompt (its imports and helpers) and tests judge it through
  :mod:`infbench.sandbox.judge`, each in its own sandbox.
"""

from __future__ import annotations

import re

from infbench.config.model import Benchmark
from infbench.evaluation.questions import Question
from infbench.evaluation.registry import AnswerSpec, Substitution, spec
from infbench.sandbox.judge import Case


def truncate_at_stop(completion: str, stop: tuple[str, ...] | list[str]) -> str:
    """``completion`` up to the earliest occurrence of any stop sequence."""
    cut = min((i for s in stop if s and (i := completion.find(s)) >= 0), default=len(completion))
    return completion[:cut]


def _answer_spec(benchmark: Benchmark) -> AnswerSpec:
    answer = spec(benchmark).answer
    if answer is None:
        raise ValueError(f"{benchmark} is judged by running its tests, not by text")
    return answer


def normalize(benchmark: Benchmark, text: str) -> str:
    """``text`` through ``benchmark``'s normalisation steps (an answer and a gold alike)."""
    for step in _answer_spec(benchmark).normalize:
        if isinstance(step, Substitution):
            text = re.sub(step.regex, step.replace, text)
        elif step == "lower":
            text = text.lower()
        elif step == "strip":
            text = text.strip()
        else:  # squeeze
            text = " ".join(text.split())
    return text


def extract(benchmark: Benchmark, response: str) -> str | None:
    """The normalised answer of a response; None if the spec's regex does not match it."""
    answer = _answer_spec(benchmark)
    if answer.extract is None:
        return normalize(benchmark, response)
    matches = re.findall(answer.extract, response)
    if not matches:
        return None
    match = matches[answer.group_select]
    if isinstance(match, tuple):  # a regex with groups: its first non-empty group
        match = next(group for group in match if group)
    return normalize(benchmark, match)


def judge_text(question: Question, response: str) -> tuple[str | None, bool]:
    """(extracted answer, correct) for a response already cut at its stop sequences."""
    extracted = extract(question.benchmark, response)
    golds = {normalize(question.benchmark, gold) for gold in question.gold}
    return extracted, bool(extracted) and extracted in golds


def humaneval_case(question: Question, response: str) -> Case:
    """The candidate program (prompt + completion) and what judges it: the problem's own prompt and tests,
    never the completion."""
    return Case(
        program=f"{question.text}{response}\n",
        entry_point=question.entry_point,
        helpers=question.text,
        test=question.test,
    )
