"""Answer extraction and normalisation of the accuracy gate, including the known traps."""

import re
import string

import pytest

from infbench.config.model import BENCHMARKS
from infbench.evaluation import judge
from infbench.evaluation.questions import Question, gsm8k_gold
from infbench.evaluation.registry import spec

GSM8K_STOP = ("Question:", "</s>", "<|im_end|>", "\n\n")


def gsm8k(gold: str) -> Question:
    return Question(benchmark="gsm8k", id="q", text="?", target=f"... #### {gold}", gold=(gold,))


def trivia(*aliases: str) -> Question:
    return Question(benchmark="triviaqa", id="q", text="?", target=aliases[0], gold=aliases)


@pytest.mark.parametrize(
    "completion,stop,expected",
    [
        (" 5+3=8.\n#### 8\n\nQuestion: next", GSM8K_STOP, " 5+3=8.\n#### 8"),
        (" Paris, France.\nQuestion", ("\n", ".", ","), " Paris"),
        ("    return x\n# comment\ndef g(): pass", ("\nclass", "\ndef", "\n#", "\nif", "\nprint"), "    return x"),
        ("no stop here", ("\n",), "no stop here"),
        ("", ("\n",), ""),
    ],
)
def test_truncate_at_earliest_stop(completion, stop, expected):
    assert judge.truncate_at_stop(completion, stop) == expected


@pytest.mark.parametrize(
    "response,expected",
    [
        ("The total is $1,000.", "1000"),  # $, comma and trailing period removed
        ("#### 1,500", "1500"),
        ("She has -7 left", "-7"),
        ("2.50 dollars", "2.50"),
        ("7", "7"),
        ("no number at all", None),
    ],
)
def test_gsm8k_flexible_extract(response, expected):
    assert judge.extract("gsm8k", response) == expected


def test_gsm8k_takes_the_last_number_not_a_recited_exemplar():
    # A model that first recites a few-shot answer (#### 8) and then answers its own question.
    response = "Maria has 5+3=8 pencils.\n#### 8\nNow for this one: 9-4=5 stickers.\n#### 5"
    assert judge.judge_text(gsm8k("5"), response) == ("5", True)
    assert judge.judge_text(gsm8k("8"), response) == ("5", False)


def test_gsm8k_gold_and_prediction_are_cleaned_alike():
    assert gsm8k_gold("Step one.\n#### 1,000") == "1,000"
    assert judge.judge_text(gsm8k("1,000"), "It costs $1,000.") == ("1000", True)
    # compared as strings, as lm-eval does: 2.50 is not 2.5
    assert judge.judge_text(gsm8k("2.5"), "2.50")[1] is False
    assert judge.judge_text(gsm8k("3"), "three")[1] is False


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The Eiffel_Tower!", "eiffel tower"),
        ("\u2018Paris\u2019", "paris"),  # curly quotes
        ("Caf\u00b4e `Rouge`", "caf e rouge"),  # acute accent and backtick become spaces
        ("An apple a day", "apple day"),
        ("Theatre of the Absurd", "theatre of absurd"),  # 'the' only as a word
        ("  New   York,  USA ", "new york usa"),
        ("Mt. Everest", "mt everest"),
    ],
)
def test_triviaqa_official_normalisation(text, expected):
    assert judge.normalize("triviaqa", text) == expected


def test_triviaqa_matches_any_alias():
    q = trivia("Mount Everest", "Everest", "Mt. Everest")
    assert judge.judge_text(q, " the Everest") == ("everest", True)
    assert judge.judge_text(q, " MT EVEREST") == ("mt everest", True)
    assert judge.judge_text(q, " K2")[1] is False
    assert judge.judge_text(q, " ")[1] is False  # an empty answer is never right


def test_humaneval_case_keeps_the_completion_out_of_the_test():
    q = Question(
        benchmark="humaneval", id="h", text="def f(x):\n", test="def check(c):\n    assert c(1) == 2\n", entry_point="f"
    )
    case = judge.humaneval_case(q, "    return x + 1")
    assert case.program == "def f(x):\n    return x + 1\n" and case.entry_point == "f"
    assert case.helpers == q.text and case.test == q.test  # the trusted side never sees the completion
    with pytest.raises(ValueError):
        judge.judge_text(q, "    return x + 1")


def test_every_benchmark_is_described_by_its_spec():
    """Prompt, extraction and the questions' source are data (specs/<name>.yaml), one per benchmark."""
    assert [(spec(b).name, spec(b).judged_by) for b in BENCHMARKS] == [
        ("gsm8k", "answer"),
        ("humaneval", "tests"),
        ("triviaqa", "answer"),
    ]
    assert spec("gsm8k").answer.group_select == -1  # the last number: a recited exemplar is not scored


def test_triviaqa_punctuation_is_the_official_set():
    """The spec's character class is exactly string.punctuation, curly quotes, acute accent and backtick."""
    punctuation = next(
        s.regex for s in spec("triviaqa").answer.normalize if not isinstance(s, str) and s.regex.startswith("[")
    )
    matched = {chr(c) for c in range(0x10000) if re.fullmatch(punctuation, chr(c))}
    assert matched == set(string.punctuation + "\u2018\u2019\u00b4`")
