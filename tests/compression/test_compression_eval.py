"""Final verification against honest and adversarial python-runtime submissions.

The "source" is a small randomly initialised Llama with SmolLM2's real
tokenizer; its likelihood sets are built with the real pipeline functions.
"""

import os
import shutil

import pytest
from compression_helpers import HONEST, SETTINGS, answers_settings, gate_job, make_package, reference_answers, run

from infbench.compression.records import verdict
from infbench.compression.submission import GIB
from infbench.compression.tasks import Task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def honest(tiny_source, tmp_path_factory):
    pkg = make_package(tmp_path_factory.mktemp("honest"), tiny_source, HONEST, name="honest")
    return pkg, run(pkg, tiny_source, empty_workers=None)  # its own empty worker, beside it (as in a job)


def test_honest_submission_verifies_with_f_equal_one(honest):
    pkg, record = honest
    assert record.failure is None, record.failure
    assert all(c.passed for c in record.checks), [c for c in record.checks if not c.passed]
    assert record.f == pytest.approx(1.0, abs=1e-4)  # float32 twin of the reference
    d = record.divergence  # reported beside F: none from a float32 twin
    assert d.tokens == record.tokens_scored and d.kld_max < 1e-4 and d.same_top_p == 1.0
    assert [c.name for c in record.checks] == ["logits_shape", "likelihood_above_source", "statefulness"]
    assert record.checks[-1].evidence["max_abs_logprob_diff"] == 0.0
    assert "in_process_audit" in record.diagnostics and record.sandbox.kind == "bwrap"
    assert record.secret_label == "public demo"
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=1.0))
    assert judged.failed_check is None and judged.score == record.f
    tight = verdict(record, Task(name="t", source="tiny", limit_gib=record.s_pkg_bytes / GIB * 0.9))
    assert tight.failed_check == "storage_package" and tight.score == 0.0
    assert record.decode.tps > 0 and record.s_res_bytes >= 4 * 1_500_000


def test_an_empty_worker_kept_across_packages_charges_the_same(tiny_source, honest):
    """The session's kept empty worker (compression_helpers.EMPTY_WORKERS, measured once for all these tests)
    charges the honest package what its own empty worker, measured beside it, did."""
    pkg, own = honest
    kept = run(pkg, tiny_source)
    assert kept.failure is None, kept.failure
    charged = [r.resident.outside(r.resident.after_load, None) for r in (kept, own)]
    assert abs(charged[0] - charged[1]) < 2**20, charged


def test_a_package_over_every_limit_is_measured_but_not_checked(tiny_source, tmp_path, honest):
    """Over the largest limit it is judged under, a package fails storage_package whatever else is measured:
    its likelihood, memory and decode speed are reported, its integrity checks and gate are not run."""
    pkg, measured = honest
    limit_gib = measured.s_pkg_bytes / GIB * 0.5
    gate = gate_job(answers_settings(), tmp_path / "no-such-reference.json", tiny_source)  # fails if it runs
    record = run(pkg, tiny_source, gate=gate, memory_limit_gib=limit_gib)
    assert record.failure is None and record.f == pytest.approx(measured.f, abs=1e-6)
    assert [c.name for c in record.checks] == ["logits_shape"]
    assert "exceeds every storage limit" in record.diagnostics["checks_not_run"]
    assert record.decode.tps > 0 and record.s_res_bytes > 0
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=limit_gib))
    assert judged.failed_check == "storage_package" and judged.score == 0.0
    assert "checks_not_run" not in measured.diagnostics  # within its limit: every check


def test_lazy_full_precision_copy_is_charged(tiny_source, tmp_path, honest):
    code = HONEST.replace(
        "    def step(self, tokens, rows):\n",
        """    def step(self, tokens, rows):
        if not hasattr(self, "fp64_copy"):
            self.fp64_copy = [p.detach().double().clone() for p in self.model.parameters()]
""",
    )
    record = run(make_package(tmp_path, tiny_source, code, name="lazy"), tiny_source)
    assert record.s_res_after_inference_bytes > 2 * record.s_res_load_bytes
    limit = max(honest[1].s_pkg_bytes, honest[1].s_res_bytes) * 1.2 / GIB
    assert verdict(honest[1], Task(name="t", source="tiny", limit_gib=limit)).failed_check is None
    assert verdict(record, Task(name="t", source="tiny", limit_gib=limit)).failed_check == "storage_resident"


def test_scaled_logits_are_scored_as_returned(tiny_source, tmp_path, honest):
    code = HONEST.replace(".logits[0, -1].float().numpy()", ".logits[0, -1].float().numpy() * 8.0")
    record = run(make_package(tmp_path, tiny_source, code, name="scaled"), tiny_source)
    # log-softmax of the returned logits: a sharper distribution, a different (lower) F
    assert record.f < honest[1].f - 1e-3
    # the same most probable tokens, other distributions; the divergence is reported, the verdict unchanged
    assert record.divergence.same_top_p == 1.0 and record.divergence.kld_mean > 10 * honest[1].divergence.kld_mean
    assert all(c.passed for c in record.checks)


@pytest.mark.parametrize(
    "name,code,cause",
    [
        ("import_error", "import not_a_module_xyz\n" + HONEST, "ModuleNotFoundError"),
        (
            "crash",
            HONEST.replace("    def release(self):\n", "    def release(self):\n        import os; os._exit(3)\n"),
            "crash",
        ),
    ],
)
def test_broken_submissions_get_failure_records(tiny_source, tmp_path, name, code, cause):
    record = run(make_package(tmp_path, tiny_source, code, name=name), tiny_source)
    assert record.failed_check is None or record.failed_check == "execution"
    assert any(c.name == "execution" and not c.passed for c in record.checks)
    assert cause in record.failure


def test_hanging_submission_times_out(tiny_source, tmp_path):
    code = HONEST.replace(
        "    def prefill(self, rows, max_new_tokens):\n",
        "    def prefill(self, rows, max_new_tokens):\n        import time; time.sleep(600)\n",
    )
    settings = SETTINGS.model_copy(update={"timeout_s": 25})
    record = run(make_package(tmp_path, tiny_source, code, name="hang"), tiny_source, settings)
    assert "timeout" in record.failure and record.wall_s < 60


def test_bad_manifest_names_the_field(tiny_source, tmp_path):
    pkg = make_package(tmp_path, tiny_source, HONEST, name="bad", runtime="tensorrt")
    record = run(pkg, tiny_source)
    assert record.checks[0].name == "package" and "field 'runtime'" in record.failure
    pkg2 = make_package(tmp_path, tiny_source, HONEST, name="noweights", weights="missing_dir")
    assert "field 'weights'" in run(pkg2, tiny_source).failure


def test_access_log_allows_reading_back_own_files_only(tmp_path):
    import os

    from infbench.compression.worker import AccessLog

    log = AccessLog([tmp_path / "package"])
    scratch = tmp_path / "scratch"
    log("os.mkdir", (str(scratch), 0o777, -1))
    log("open", (str(tmp_path / "written.bin"), "wb", os.O_WRONLY | os.O_CREAT))
    log("open", (str(scratch / "offloaded.dat"), "rb", os.O_RDONLY))
    log("open", (str(tmp_path / "written.bin"), "rb", os.O_RDONLY))
    log("open", (str(tmp_path / "package" / "weights.bin"), "rb", os.O_RDONLY))
    assert log.reads == []
    existing = tmp_path / "someone_elses.bin"
    existing.write_bytes(b"x")
    log("open", (str(existing), "wb", os.O_WRONLY | os.O_CREAT))  # overwriting does not make it ours
    log("open", (str(existing), "rb", os.O_RDONLY))
    log("open", (str(tmp_path / "other.bin"), "rb", os.O_RDONLY))
    assert log.reads == [os.path.realpath(existing), os.path.realpath(tmp_path / "other.bin")]


@pytest.mark.parametrize(
    "name,code,check,cause",
    [
        (
            "short_vocab",
            HONEST.replace(".logits[0, -1].float().numpy()", ".logits[0, -1].float().numpy()[:1000]"),
            "logits_shape",
            "'source_vocab': 49152",
        ),
        (
            "positions_for_a_step",
            HONEST.replace(
                "        return self.last_logits([self.rows[row] for row in rows])",
                "        return np.zeros((len(rows), 2, 49152), np.float32)",
            ),
            "logits_shape",
            "'expected': [4, 49152]",
        ),
        (
            "a_row_short",
            HONEST.replace(
                "        return self.last_logits([self.rows[row] for row in rows])",
                "        return self.last_logits([self.rows[row] for row in rows])[1:]",
            ),
            "logits_shape",
            "'logits_shape': [3, 49152]",
        ),
        (
            "not_a_number",
            HONEST.replace(
                "        return self.last_logits([self.rows[row] for row in rows])",
                "        return self.last_logits([self.rows[row] for row in rows]) * np.nan",
            ),
            "execution",
            "non-finite log-probs",
        ),
    ],
)
def test_failures_inside_measurement_are_records(tiny_source, tmp_path, name, code, check, cause):
    record = run(make_package(tmp_path, tiny_source, code, name=name), tiny_source)
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=1.0))
    assert judged.failed_check == check and judged.score == 0.0
    assert cause in record.failure


def test_tokenizer_os_error_is_a_record(tiny_source, tmp_path):
    pkg = make_package(tmp_path, tiny_source, HONEST, name="badtok", tokenizer="inference.py")  # a file: OSError
    record = run(pkg, tiny_source)
    assert record.checks[-1].name == "tokenizer" and record.checks[-1].evidence["cause"] == "OSError"
    assert verdict(record, Task(name="t", source="tiny", limit_gib=1.0)).failed_check == "tokenizer"


def test_accuracy_gate_against_other_questions_is_a_record(tiny_source, tmp_path):
    from infbench.evaluation import driver, results
    from infbench.evaluation.questions import load_questions

    settings = answers_settings()
    other = load_questions(settings, seed=1)
    reference = driver.evaluate(
        lambda batch, n, stop: ["42"] * len(batch), other, settings, label="source", sandbox=SETTINGS.sandbox
    )
    results.write_json(tmp_path / "reference.json", reference)
    gate = gate_job(settings, tmp_path / "reference.json", tiny_source)
    record = run(make_package(tmp_path, tiny_source, HONEST, name="gated"), tiny_source, gate=gate)
    judged = verdict(record, Task(name="t", source="tiny", limit_gib=1.0))
    assert judged.failed_check == "accuracy_gate" and "AnswerMismatchError" in record.failure


def test_accuracy_gate_evidence_keeps_each_answers_outcome(tiny_source, tmp_path):
    """The candidate's own completions, judged in the sandbox: the record keeps every item's outcome and
    reason, and how HumanEval programs were isolated."""
    settings = answers_settings()
    gate = gate_job(settings, reference_answers(settings, tmp_path / "reference.json"), tiny_source)
    record = run(make_package(tmp_path, tiny_source, HONEST, name="gated"), tiny_source, gate=gate)
    check = next(c for c in record.checks if c.name == "accuracy_gate")
    items = check.evidence["items"]
    assert [i["benchmark"] for i in items] == ["gsm8k", "humaneval", "triviaqa"]
    humaneval = items[1]
    assert humaneval["correct"] is False and humaneval["detail"].startswith("failed: "), humaneval
    assert check.evidence["judged_by"]["humaneval"].startswith("bubblewrap")


def test_symlink_out_of_the_package_is_a_record(tiny_source, tmp_path):
    pkg = make_package(tmp_path, tiny_source, HONEST, name="linked")
    os.symlink(tiny_source / "hf/model.safetensors", pkg / "model/extra.safetensors")
    record = run(pkg, tiny_source)
    assert record.checks[-1].name == "package" and "extra.safetensors: symlink" in record.failure


def test_reward_reads_only_the_search_set(tiny_source, smollm2_source, tmp_path):
    """The agent's workspace holds the source and the search set only: the reward needs nothing else."""
    import json

    from infbench.compression import verification
    from infbench.config.model import VerificationSettings
    from infbench.layout import Layout

    results = tmp_path / "results"
    shutil.copytree(tiny_source / "hf", results / "sources/tiny/hf")
    record = json.loads((smollm2_source[0] / "source.json").read_text())
    (results / "sources/tiny/source.json").write_text(json.dumps({**record, "name": "tiny"}))
    shutil.copytree(tiny_source / "search", results / "likelihood/tiny/search")
    pkg = make_package(tmp_path, tiny_source, HONEST, name="agent")
    judged = verification.reward(
        str(pkg),
        Task(name="tiny-1gib", source="tiny", limit_gib=1.0),
        results=Layout(str(results)),
        settings=VerificationSettings(**SETTINGS.model_dump(exclude={"threads", "sandbox"})),
        sandbox=SETTINGS.sandbox,
        threads=1,
        log_path=tmp_path / "reward_log.jsonl",
    )
    assert judged.failure is None and judged.reward == pytest.approx(10.0, abs=1e-3)
    assert judged.secret_label is None


def test_a_vllm_package_without_the_vllm_environment_stops_the_job(tiny_source, tmp_path, monkeypatch):
    """The machine's setup, not the package, is at fault: no failure record, one line naming the interpreter."""
    import infbench.vllm_env
    from infbench.vllm_env import VllmEnvironmentMissing

    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_source / "hf", pkg / "model")
    (pkg / "manifest.yaml").write_text("name: p\nsource: tiny\nruntime: vllm\nweights: model\ntokenizer: model\n")
    monkeypatch.setattr(infbench.vllm_env, "vllm_python", lambda: tmp_path / "no-venv/bin/python")
    with pytest.raises(VllmEnvironmentMissing, match=r"no-venv/bin/python: the vLLM environment is not installed"):
        run(pkg, tiny_source)
