"""Rerun guarantees on the tiny pipeline: nothing to do when up to date, exactly the
downstream jobs after a change, a SIGKILLed run resumes to the same tables (two runs from
scratch agreeing byte for byte: tests/workflow/test_slurm.py, whose second run goes through sbatch)."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import (
    REPO,
    SNAKEMAKE,
    TABLE_TARGET,
    assert_same_results,
    planned_jobs,
    run_snakemake,
    tiny_config,
)

from infbench.hashing import sha256_file
from infbench.layout import Layout

pytestmark = pytest.mark.slow


def test_up_to_date_workflow_plans_no_jobs(tiny_run):
    workdir, config = tiny_run
    proc = run_snakemake(workdir, "-n", TABLE_TARGET, "--configfile", str(config))
    assert "Nothing to be done" in proc.stdout + proc.stderr
    assert planned_jobs(proc) == {}


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"bootstrap_resamples": 150}, {"score_reference": 2, "reference_table": 1}),
        ({"context_seed": 1}, {"contexts": 2, "sample_continuations": 2, "score_reference": 2, "reference_table": 1}),
    ],
    ids=["bootstrap_resamples", "context_seed"],
)
def test_one_config_value_reruns_exactly_downstream(tiny_run, tmp_path, change, expected):
    workdir, _ = tiny_run
    proc = run_snakemake(workdir, "-n", TABLE_TARGET, "--configfile", str(tiny_config(tmp_path / "c.yaml", **change)))
    assert planned_jobs(proc) == expected


def test_a_new_operator_secret_reruns_only_the_verification_set(tiny_run):
    """The search set follows the public seeds: rotating the secret leaves it (and an agent's rewards) alone."""
    workdir, config = tiny_run
    env = {**os.environ, "INFBENCH_OPERATOR_SECRET": "the operator's round-2 secret"}
    proc = run_snakemake(workdir, "-n", TABLE_TARGET, "--configfile", str(config), env=env)
    assert planned_jobs(proc) == {"contexts": 1, "sample_continuations": 1, "score_reference": 1, "reference_table": 1}
    assert "results/likelihood/smollm2-135m/verification/contexts.parquet" in proc.stdout


def test_one_rule_script_reruns_exactly_downstream(tiny_run, tmp_path):
    """Snakemake reruns a `script:` rule whose script is newer than its outputs."""
    workdir, config = tiny_run
    copy = tmp_path / "workflow-copy"
    copy.mkdir()
    shutil.copy2(REPO / "Snakefile", copy)
    for folder in ["workflow", "envs", "config"]:
        shutil.copytree(REPO / folder, copy / folder)
    args = ["-n", TABLE_TARGET, "--configfile", str(config)]
    assert planned_jobs(run_snakemake(workdir, *args, snakefile=copy / "Snakefile")) == {}
    script = copy / "workflow/scripts/sample_continuations.py"
    script.write_text(script.read_text() + "# changed\n")
    proc = run_snakemake(workdir, *args, snakefile=copy / "Snakefile")
    assert planned_jobs(proc) == {"sample_continuations": 2, "score_reference": 2, "reference_table": 1}


def _outputs_are_whole(workdir):
    """Every output present under results/ is readable to the end."""
    for path in (workdir / "results").rglob("*"):
        if path.name.startswith("."):
            continue
        if path.suffix == ".parquet":
            pq.read_table(path)
        elif path.suffix == ".json":
            json.loads(path.read_text())


def test_sigkill_mid_job_then_rerun_incomplete_gives_the_same_results(tiny_run, tmp_path):
    baseline, config = tiny_run
    shutil.copytree(baseline / "results/sources", tmp_path / "results/sources")  # start at the sampling
    done, todo = Layout(str(baseline / "results")), Layout(str(tmp_path / "results"))
    for set_name in ("search", "verification"):
        for path in (Layout.contexts, Layout.contexts_manifest):
            Path(path(todo, "smollm2-135m", set_name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path(done, "smollm2-135m", set_name), path(todo, "smollm2-135m", set_name))
    proc = subprocess.Popen(
        [
            SNAKEMAKE,
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--cores",
            "1",
            TABLE_TARGET,
            "--configfile",
            str(config),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    logs = [tmp_path / f"logs/sample_continuations/smollm2-135m/{s}.log" for s in ("search", "verification")]
    try:
        deadline = time.monotonic() + 900
        while not any(log.exists() for log in logs):
            assert proc.poll() is None, "snakemake ended before sampling started"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # snakemake and the job's script
        proc.wait()
    started = next(log for log in logs if log.exists())
    killed = tmp_path / "results/likelihood/smollm2-135m" / started.stem
    assert not (killed / "continuations.parquet").exists() and not (killed / "sampling.json").exists()
    _outputs_are_whole(tmp_path)
    assert (tmp_path / ".snakemake/incomplete").exists()

    # SIGKILL leaves Snakemake's lock behind; unlock, then resume.
    run_snakemake(tmp_path, "--unlock", TABLE_TARGET, "--configfile", str(config))
    resumed = run_snakemake(tmp_path, "-n", "--rerun-incomplete", TABLE_TARGET, "--configfile", str(config))
    assert planned_jobs(resumed) == {"sample_continuations": 2, "score_reference": 2, "reference_table": 1}
    run_snakemake(tmp_path, "--cores", "2", "--rerun-incomplete", TABLE_TARGET, "--configfile", str(config))
    assert_same_results(baseline, tmp_path)


def test_every_table_carries_its_provenance(tiny_run):
    workdir, _ = tiny_run
    tables = sorted((workdir / "results/tables").glob("*.csv"))
    assert tables
    for table in tables:
        record = json.loads(table.with_suffix(".provenance.json").read_text())
        assert record["params"]["config"]["likelihood"]["seed"] == 0
        assert record["params"]["config"]["likelihood"]["context_seed"] == 0
        assert record["params"]["config"]["sources"]
        assert {"torch", "transformers", "snakemake", "infbench"} <= set(record["versions"])
        assert len(record["infbench_git_commit"] or "") == 40
        assert record["inputs"]
        for path, digest in record["inputs"].items():
            assert sha256_file(workdir / path) == digest
