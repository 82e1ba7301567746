"""Code-aware reruns: after an edit under src/infbench/, Snakemake's own params trigger plans exactly the
jobs whose code the edit changed, and their downstream (src/infbench/code_digest.py).

The embedded default's whole workflow is made up to date without doing its work
(infbench.perf.noop_rerun: each rule's code replaced by one that creates its outputs), in a copy of
the repository whose package is the one on PYTHONPATH; each test edits that copy, dry-runs the real
Snakefile and restores the file."""

import ast
import os
import re
import shutil

import pytest
import yaml
from conftest import REPO, planned_jobs

from infbench import code_digest
from infbench.config.model import default_servers
from infbench.perf import noop_rerun

COPIED = ["Snakefile", "workflow", "config", "envs", "examples", "src"]
VERIFICATION = {"measure_candidate": 11, "verify": 22, "compression_table": 1, "operator_secret": 1}
RUNS = {"reference_search": 1, "ingest_run": 1, "runs_analysis": 1}


@pytest.fixture(scope="module")
def up_to_date(tmp_path_factory):
    """(repository copy, working directory, environment) with every output of `rule all` up to date; the
    working directory is the copy itself, as a user runs the workflow (examples/servers are submissions)."""
    root = tmp_path_factory.mktemp("repo")
    for name in COPIED:
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(
            REPO / name,
            root / name,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if (REPO / name).is_dir() else {}),
        )
    workdir = root
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    noop_rerun.make_up_to_date(root, workdir, root / "config/config.yaml", env)
    return root, workdir, env


def _plan(up_to_date) -> dict[str, int]:
    root, workdir, env = up_to_date
    proc = noop_rerun.dry_run(root, workdir, root / "config/config.yaml", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return planned_jobs(proc)


def _edited(up_to_date, module: str, edit) -> dict[str, int]:
    """The jobs planned while ``module`` (a path under src/infbench/) holds ``edit(text)``."""
    path = up_to_date[0] / "src/infbench" / module
    original = path.read_text()
    path.write_text(edit(original))
    try:
        return _plan(up_to_date)
    finally:
        path.write_text(original)


def _statement_in(function: str, statement: str):
    """An edit that adds ``statement`` before the last statement of top-level ``function``."""

    def edit(text: str) -> str:
        node = next(n for n in ast.parse(text).body if getattr(n, "name", None) == function)
        last = node.body[-1]
        lines = text.splitlines(keepends=True)
        lines.insert(last.lineno - 1, " " * last.col_offset + statement + "\n")
        return "".join(lines)

    return edit


def _docstring_edit(text: str) -> str:
    assert text.startswith('"""')
    return text.replace('"""', '"""Edited: ', 1)


def test_an_up_to_date_workflow_plans_nothing(up_to_date):
    assert _plan(up_to_date) == {}


def test_editing_the_scorer_plans_scoring_verification_and_tables_but_not_sampling(up_to_date):
    planned = _edited(
        up_to_date, "compression/scoring.py", _statement_in("score_continuations", "assert batch_size > 0")
    )
    assert planned == {
        "score_reference": 2,
        "reference_table": 1,
        "plot_reference": 1,
        **VERIFICATION,
        **RUNS,
        "all": 1,
    }


def test_editing_an_integrity_check_plans_verification_and_what_follows(up_to_date):
    planned = _edited(up_to_date, "compression/integrity.py", _statement_in("statefulness", "assert tolerance > 0"))
    assert planned == {**VERIFICATION, **RUNS, "all": 1}


def test_editing_the_replay_client_plans_the_serving_jobs_that_replay(up_to_date):
    planned = _edited(up_to_date, "serving/replay.py", _statement_in("run", "assert settings is not None"))
    assert planned == {
        "serving_calibrate": 1,
        "serving_baseline": 1,
        "serving_replay": 3,
        "serving_table": 1,
        "serving_verify": 3,
        "serving_verified_table": 1,
        "operator_secret": 1,
        "all": 1,
    }


def test_changing_one_servers_spec_plans_only_that_servers_jobs(up_to_date, tmp_path):
    """The targets' key holds the reference's spec only: a change to vLLM's spec reruns vLLM's baseline and
    development replay and the table, not the calibration, the other replays or the verifications."""
    root, workdir, env = up_to_date
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    specs = {name: spec.model_dump(mode="json") for name, spec in default_servers().items()}
    specs["vllm"]["command"] += ["--max-num-seqs", "4"]
    config["serving"]["servers"] = specs
    changed = tmp_path / "config.yaml"
    changed.write_text(yaml.safe_dump(config, sort_keys=False))
    proc = noop_rerun.dry_run(root, workdir, changed, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert planned_jobs(proc) == {"serving_baseline": 1, "serving_replay": 1, "serving_table": 1, "all": 1}


@pytest.mark.parametrize("module", ["compression/scoring.py", "serving/__init__.py"])
def test_a_docstring_edit_plans_nothing(up_to_date, module):
    assert _edited(up_to_date, module, _docstring_edit) == {}


def test_code_added_to_a_docstring_only_package_init_plans_every_job_importing_the_package(up_to_date):
    """serving/__init__.py runs whenever any serving module is imported: its code is part of every job that
    imports one, and of nothing else."""
    planned = _edited(up_to_date, "serving/__init__.py", lambda text: text + "DEFAULT_PORT = 8000\n")
    serving = {
        "serving_synthetic": 1,
        "serving_workload": 1,
        "serving_coverage": 1,
        "serving_calibrate": 1,
        "serving_baseline": 1,
        "serving_replay": 3,
        "serving_table": 1,
        "serving_verification_reference": 1,
        "serving_verify": 3,
        "serving_verified_table": 1,
    }
    assert planned == {**serving, "operator_secret": 1, "all": 1}


def test_every_rule_with_a_script_passes_the_code_of_that_script():
    for smk in sorted((REPO / "workflow/rules").glob("*.smk")):
        for block in re.split(r"\n\s*rule ", smk.read_text())[1:]:
            name = block.split(":")[0]
            script = re.search(r'script:\n\s+"\.\./scripts/(\w+)\.py"', block)
            if script is None:
                continue
            code = re.search(r"\n\s+params:\n\s+code=(.*?),\n(?=\s+\w+[=:])", block, re.S)
            assert code, f"rule {name} ({smk.name}) has no code= parameter"
            assert code.group(1) == "candidate_code" or re.search(rf'code\(\s*"{script.group(1)}"', code.group(1)), name


def test_sampling_reaches_the_perplexity_formulas_but_not_the_scorer():
    reach = code_digest.reach(REPO / "workflow/scripts/sample_continuations.py")
    scoring = {part for module, part in reach.parts if module == "infbench.compression.scoring"}
    assert {"cross_entropy", "perplexity"} <= scoring
    assert not {"score_continuations", "target_log_probs", "score_pair"} & scoring


def test_a_worker_run_by_name_is_reached_whole():
    """measure_candidate starts `python -m infbench.compression.worker`: that module is part of its code."""
    reach = code_digest.reach(REPO / "workflow/scripts/measure_candidate.py")
    worker = {part for module, part in reach.parts if module == "infbench.compression.worker"}
    assert worker == set(code_digest._load("infbench.compression.worker").parts)
    assert {"llama_cpp", "gptqmodel", "transformers"} <= reach.third_party


def test_an_import_guarded_by_except_import_error_is_not_required(tmp_path):
    """provenance reads llama.cpp's build flags where llama-cpp-python is installed; the vLLM environment
    runs without it."""
    script = tmp_path / "job.py"
    script.write_text("try:\n    import llama_cpp\nexcept (OSError, ImportError):\n    pass\nimport pandas\n")
    assert code_digest.reach(script).third_party == {"pandas"}
    sampling = code_digest.reach(REPO / "workflow/scripts/sample_continuations.py")
    assert "infbench.provenance" in sampling.modules and "llama_cpp" not in sampling.third_party


def test_servers_launched_by_config_and_a_submissions_files_are_reached(tmp_path):
    plain = code_digest.digest(REPO / "workflow/scripts/serving_replay.py")
    with_servers = code_digest.digest(
        REPO / "workflow/scripts/serving_replay.py", also_modules=["infbench.serving.instant"]
    )
    assert plain != with_servers
    server = tmp_path / "server.py"
    server.write_text("from infbench.serving.llamacpp_server import main\nmain()\n")
    reach = code_digest.reach(REPO / "workflow/scripts/serving_verify.py", also_files=[server])
    assert ("infbench.serving.llamacpp_server", "main") in reach.parts


def test_package_data_counts(tmp_path):
    """The embedded answer items are data files beside the modules that read them."""
    reach = code_digest.reach(REPO / "workflow/scripts/answers_reference.py")
    assert any(p.name == "gsm8k_templates.jsonl" for p in reach.data_files())


def test_the_digest_cache_is_dropped_when_a_package_file_changes(tmp_path):
    scripts = REPO / "workflow/scripts"
    cache = code_digest.DigestCache(tmp_path / "digests.json", scripts)
    value = cache.digest("verify")
    assert value == code_digest.digest(scripts / "verify.py")
    assert code_digest.DigestCache(tmp_path / "digests.json", scripts).digests  # kept on disk
    stale = tmp_path / "stale.json"
    stale.write_text('{"state": "another state", "digests": {"x": "y"}}')
    assert code_digest.DigestCache(stale, scripts).digests == {}
