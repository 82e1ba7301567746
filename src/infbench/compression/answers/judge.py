"""Answer extraction and comparison (PROTOCOL A5.2, ANCHORS "Answer benchmarks").

- Stop sequences cut a completion at the earliest occurrence of any of them
  (lm-eval's ``until``), whether or not the runtime stopped there itself.
- GSM8K, lm-eval's ``flexible-extract``: the LAST match of
  ``(-?[$0-9.,]{2,})|(-?[0-9]+)``; then, on prediction and gold alike, lm-eval's
  ``regexes_to_ignore`` (``,``, ``$``, everything up to ``#### ``, a trailing
  ``.``) and a string comparison. The last match, not the first: a model that
  recites a few-shot answer before its own must not be scored on the recital.
- TriviaQA, the official ``normalize_answer``: ``_`` to space, lowercase,
  punctuation (with curly quotes, acute accent and backtick) to space, the
  words a/an/the removed, whitespace collapsed; correct if the normalised
  prediction is not empty and equals any normalised alias.
- HumanEval: the candidate program is prompt + completion; the problem's
  prompt (its imports and helpers) and tests judge it through
  :mod:`infbench.sandbox.judge`, each in its own sandbox.
"""

from __future__ import annotations

import re
import string

from infbench.compression.answers.questions import Question
from infbench.sandbox.judge import Case

FLEXIBLE_NUMBER = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
GSM8K_IGNORE = (re.compile(","), re.compile(r"\$"), re.compile(r"(?s).*#### "), re.compile(r"\.$"))
TRIVIAQA_PUNCTUATION = frozenset(string.punctuation + "\u2018\u2019\u00b4`")
ARTICLES = re.compile(r"\b(a|an|the)\b")


def truncate_at_stop(completion: str, stop: tuple[str, ...] | list[str]) -> str:
    """``completion`` up to the earliest occurrence of any stop sequence."""
    cut = min((i for s in stop if s and (i := completion.find(s)) >= 0), default=len(completion))
    return completion[:cut]


def gsm8k_clean(text: str) -> str:
    for pattern in GSM8K_IGNORE:
        text = pattern.sub("", text)
    return text.strip().lower()


def gsm8k_extract(response: str) -> str | None:
    """The final number of a response (flexible extract), cleaned; None if it has no number."""
    matches = FLEXIBLE_NUMBER.findall(response)
    if not matches:
        return None
    last = next(group for group in matches[-1] if group)
    return gsm8k_clean(last)


def triviaqa_normalize(text: str) -> str:
    text = text.replace("_", " ").lower()
    text = "".join(" " if ch in TRIVIAQA_PUNCTUATION else ch for ch in text)
    text = ARTICLES.sub(" ", text)
    return " ".join(text.split())


def judge_text(question: Question, response: str) -> tuple[str | None, bool]:
    """(extracted answer, correct) for a GSM8K or TriviaQA response already cut at its stop sequences."""
    if question.benchmark == "gsm8k":
        extracted = gsm8k_extract(response)
        return extracted, extracted is not None and extracted == gsm8k_clean(question.gold[0])
    if question.benchmark == "triviaqa":
        extracted = triviaqa_normalize(response)
        return extracted, bool(extracted) and extracted in {triviaqa_normalize(alias) for alias in question.gold}
    raise ValueError(f"{question.benchmark} is judged by running its tests, not by text")


def humaneval_case(question: Question, response: str) -> Case:
    """The candidate program (prompt + completion) and what judges it: the problem's own prompt and tests,
    never the completion."""
    return Case(
        program=f"{question.text}{response}\n",
        entry_point=question.entry_point,
        helpers=question.text,
        test=question.test,
    )
