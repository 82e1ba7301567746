"""GSM8K-style problems instantiated from templates, their numbers and names drawn by a seed (the question
seed, which mixes ``answers.seed`` with the operator's secret), their answers computed.

A public benchmark can be memorised, and its answers carried as a key; a problem whose numbers are drawn by a
secret cannot be known in advance (GSM-Symbolic, Mirzadeh et al. 2024, builds GSM8K variants the same way). A
template (one line of ``data/gsm8k_templates.jsonl``) has

- ``question``: the text, ``{slot}`` for each number, ``{name}`` and ``{other}`` for two people, ``{he}``,
  ``{He}``, ``{his}``, ``{His}``, ``{him}`` for the first one's pronouns;
- ``slots``: each number's range ``[low, high]`` (inclusive; a bound may be an expression of earlier slots)
  or an expression of earlier slots;
- ``answer``: the expression of the slots that is the gold final number.

Expressions are integer arithmetic: numbers, slot names, ``+ - * //`` and parentheses, nothing else.
"""

from __future__ import annotations

import ast
import json
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from infbench.seeding import derive_seed

PEOPLE = (
    ("Anna", "f"),
    ("Ben", "m"),
    ("Lily", "f"),
    ("Jack", "m"),
    ("Emma", "f"),
    ("Tom", "m"),
    ("Mia", "f"),
    ("Carlos", "m"),
    ("Nina", "f"),
    ("Omar", "m"),
    ("Sara", "f"),
    ("Ali", "m"),
    ("Kate", "f"),
    ("Leo", "m"),
    ("Priya", "f"),
    ("Hugo", "m"),
    ("Zoe", "f"),
    ("Ravi", "m"),
    ("Ines", "f"),
    ("Sam", "m"),
)
PRONOUNS = {
    "f": {"he": "she", "He": "She", "his": "her", "His": "Her", "him": "her"},
    "m": {"he": "he", "He": "He", "his": "his", "His": "His", "him": "him"},
}
_OPERATORS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}


class Template(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    question: str
    slots: dict[str, tuple[int | str, int | str] | str]
    answer: str


def evaluate(expression: str | int, values: dict[str, int]) -> int:
    """Integer arithmetic over ``values`` (module docstring); anything else is a ``ValueError``."""
    if isinstance(expression, int):
        return expression

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in values:
            return values[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not integer arithmetic of the slots: {expression!r}")

    return value(ast.parse(expression, mode="eval").body)


def instantiate(template: Template, seed: int) -> tuple[str, str, str]:
    """(id, question text, gold answer) of ``template`` with numbers and people drawn by ``seed``."""
    rng = np.random.default_rng(derive_seed(seed, "gsm8k template", template.id))
    values: dict[str, int] = {}
    for name, spec in template.slots.items():
        if isinstance(spec, str):
            values[name] = evaluate(spec, values)
        else:
            low, high = (evaluate(bound, values) for bound in spec)
            if high < low:
                raise ValueError(f"template {template.id}: slot {name} has the empty range [{low}, {high}]")
            values[name] = int(rng.integers(low, high + 1))
    first, second = rng.choice(len(PEOPLE), size=2, replace=False)
    (name, kind), (other, _) = PEOPLE[first], PEOPLE[second]
    text = template.question.format(name=name, other=other, **PRONOUNS[kind], **values)
    gold = evaluate(template.answer, values)
    qid = f"{template.id}:" + ",".join(f"{k}={v}" for k, v in values.items())
    return qid, text, str(gold)


def read(text: str) -> list[Template]:
    return [Template.model_validate(json.loads(line)) for line in text.splitlines() if line.strip()]


def rows(templates: list[Template], seed: int) -> list[dict[str, Any]]:
    """The instantiated problems as GSM8K rows (``question``, ``answer`` ending ``#### N``), with their ids."""
    out = []
    for template in templates:
        qid, question, gold = instantiate(template, seed)
        out.append({"id": qid, "question": question, "answer": f"#### {gold}"})
    return out
