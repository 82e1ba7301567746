"""The accuracy gate end to end: the real SmolLM2 source through the transformers runtime, the reference rule,
the config (the HumanEval judge itself: tests/sandbox/test_judge.py)."""

import pytest
import yaml
from conftest import REPO, planned_jobs, run_snakemake

from infbench.compression.accuracy import compute_reference
from infbench.config.model import SandboxSettings
from infbench.evaluation import driver, judge, results

SANDBOX = SandboxSettings(allow_unsandboxed=True, tmp_mb=64)  # bubblewrap where it works

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())


def small(settings, n: int, **max_new_tokens):
    """``n`` questions per benchmark; token budgets capped so the CPU test stays short."""
    return settings.model_copy(
        update={
            b: settings.benchmark(b).model_copy(update={"n_questions": n, "max_new_tokens": max_new_tokens[b]})
            for b in max_new_tokens
        }
    )


def test_eos_ids_are_the_tokenizers_and_the_generation_configs():
    from types import SimpleNamespace

    from infbench.evaluation.generation import eos_ids

    assert eos_ids(SimpleNamespace(eos_token_id=2), SimpleNamespace(eos_token_id=[7, 2])) == [2, 7]
    assert eos_ids(SimpleNamespace(eos_token_id=None), SimpleNamespace(eos_token_id=5)) == [5]
    assert eos_ids(SimpleNamespace(eos_token_id=3), SimpleNamespace(eos_token_id=None)) == [3]


@pytest.mark.slow
def test_every_runtime_generates_alike(smollm2_source, tmp_path):
    """One greedy generation: a batch driven by the pipeline's greedy harness (the source's A(p) and every
    candidate, here the source through the hf runtime's runner) and a token-id prompt through transformers'
    generate (the serving reference) stop at the same EOS and stop sequences and give the same completions, on
    a model whose greedy decoding reaches EOS."""
    import verify_helpers as vh

    from infbench.compression.accuracy import greedy_generate_fn
    from infbench.compression.runtimes.hf import HFRunner
    from infbench.evaluation import generation
    from infbench.serving.verify.reference import greedy_text, load_model

    model, tokenizer = load_model(vh.tiny_model(tmp_path / "tiny", smollm2_source[0] / "hf", seed=0), "float32")
    eos = generation.eos_ids(tokenizer, model.generation_config)
    prompts = ["Question: What is 2+3?\nAnswer:", "Question: Who wrote Hamlet?\nAnswer:", "def f(x):\n"]
    batched = greedy_generate_fn(HFRunner.of(model), tokenizer, eos)
    completions = []
    for stop in (["Question:", "\n\n"], ["e"], []):
        expected = [greedy_text(model, tokenizer, tokenizer(p)["input_ids"], 16, stop) for p in prompts]
        assert [c.text for c in batched(prompts, 16, stop)] == expected
        completions.append(expected)
    assert completions[1] != completions[2]  # the stop sequence "e" ended some generation early


@pytest.mark.slow
def test_smollm2_reference_end_to_end(smollm2_source, answer_settings, tmp_path):
    """The real source on 3 questions per benchmark: generate, judge, write the frozen reference, gate."""
    out, _ = smollm2_source
    settings = small(answer_settings, 3, gsm8k=96, humaneval=48, triviaqa=24)
    ref = compute_reference(
        "smollm2-135m",
        out / "hf",
        settings,
        tmp_path / "reference.json",
        tmp_path / "reference_items.parquet",
        question_seed=settings.seed,
        sandbox=SANDBOX,
        threads=2,
    )
    assert [(b.benchmark, b.n) for b in ref.benchmarks] == [("gsm8k", 3), ("humaneval", 3), ("triviaqa", 3)]
    by_bench = {b.benchmark: b for b in ref.benchmarks}
    # Easy items (seed 0 draws 2 + 3*10 cows, 8 cars * 20 seats; Mars, Everest): a 135M model gets some.
    assert by_bench["gsm8k"].n_correct >= 1 and by_bench["triviaqa"].n_correct >= 1
    for item in ref.items:
        stop = settings.benchmark(item.benchmark).stop
        assert item.response == judge.truncate_at_stop(item.completion, stop)
        if item.response != item.completion:  # stopped early: at most a token past the stop sequence
            assert len(item.completion) - len(item.response) <= max(map(len, stop)) + 16
    gsm = [i for i in ref.items if i.benchmark == "gsm8k"]
    assert all(i.extracted is not None for i in gsm)
    assert all(i.detail.startswith(("passed", "failed", "timed_out")) for i in ref.items if i.benchmark == "humaneval")
    # the source's answers as generated, with its log-prob of each token (gate_consistency reads them)
    assert all(i.tokens and len(i.logprobs) == len(i.tokens) and max(i.logprobs) <= 0 for i in ref.items)

    frozen = results.read_json(tmp_path / "reference.json")
    assert frozen.items == ref.items and frozen.provenance.params["source"] == "smollm2-135m"
    assert results.read_items_parquet(tmp_path / "reference_items.parquet") == ref.items
    assert driver.gate(frozen, frozen, settings.rho).passed
    # a candidate that answers nothing fails the gate against it
    silent, verdict = driver.gate_candidate(
        lambda batch, n, stop: [""] * len(batch),
        settings,
        tmp_path / "reference.json",
        label="silent",
        question_seed=settings.seed,
        sandbox=SANDBOX,
    )
    assert silent.mean_accuracy == 0 and not verdict.passed and verdict.reference_accuracy == ref.mean_accuracy


def test_schema_defaults_are_the_paper_values():
    a = SCHEMA["properties"]["answers"]["properties"]
    assert a["rho"]["default"] == 0.8 and a["questions"]["default"] == "datasets"
    paper = {"gsm8k": (50, 4, 320), "humaneval": (50, 0, 384), "triviaqa": (50, 5, 24)}
    for bench, expected in paper.items():
        p = a[bench]["properties"]
        assert (p["n_questions"]["default"], p["shots"]["default"], p["max_new_tokens"]["default"]) == expected
    assert a["humaneval"]["properties"]["stop"]["default"] == ["\nclass", "\ndef", "\n#", "\nif", "\nprint"]
    assert a["triviaqa"]["properties"]["dataset"]["properties"]["name"]["default"] == "rc.nocontext"
    assert a["gsm8k"]["properties"]["dataset"]["properties"]["split"]["default"] == "test"


def test_reference_rule_is_planned_for_each_source(workdir):
    jobs = planned_jobs(run_snakemake(workdir, "-n"))
    assert jobs["answers_reference"] == 1


@pytest.mark.parametrize(
    "old,new,expected",
    [
        (
            "gsm8k: {n_questions: 26}",
            "gsm8k: {n_questions: 40}",
            "config key 'answers.gsm8k.n_questions': 40 questions asked, the question pool has only 26",
        ),
        ("triviaqa: {n_questions: 26}", "triviaqa: {n_questions: 26, shots: 6}", "config key 'answers.triviaqa.shots'"),
        (
            "humaneval: {n_questions: 26}",
            "humaneval: {n_questions: 26, shots: 3}",
            "'answers.humaneval.shots': Input should be 0",
        ),
    ],
)
def test_bad_answers_config_fails_before_any_job(tmp_path, old, new, expected):
    text = (REPO / "config/config.yaml").read_text()
    assert old in text
    (tmp_path / "bad.yaml").write_text(text.replace(old, new))
    proc = run_snakemake(tmp_path, "-n", "--configfile", str(tmp_path / "bad.yaml"), check=False)
    assert proc.returncode != 0
    assert expected in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()
