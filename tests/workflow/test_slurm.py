"""The tiny pipeline on a real one-node SLURM cluster (tests/slurm/cluster.sh) through
`--profile profiles/slurm`, compared with the same pipeline run locally.

Needs root and apt-get (Debian's slurm and munge). Elsewhere it is skipped, except
where INFBENCH_REQUIRE_SLURM=1 (CI, .ci/run): there a missing cluster fails."""

import json
import os
import shutil
import subprocess
import time

import pytest
from conftest import (
    REPO,
    SNAKEMAKE,
    TABLE_TARGET,
    assert_same_results,
    planned_jobs,
    run_snakemake,
)

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests/slurm/cluster.sh"
RULES = ["source_model", "contexts", "sample_continuations", "score_reference", "reference_table"]
# The profile, polling the test cluster's squeue from 1 s after a job ends (the profile's 5 s suits a shared
# controller; the plugin adds 10 s per check that finds nothing finished, and these jobs take seconds)
PROFILE = ["--profile", str(REPO / "profiles/slurm"), "--slurm-init-seconds-before-status-checks", "1"]


def _cannot_run() -> str | None:
    if os.geteuid() != 0:
        return "the one-node SLURM cluster needs root (daemons run as root, packages come from apt)"
    if not all(shutil.which(c) for c in ("munged", "slurmctld", "slurmd", "sbatch")) and not shutil.which("apt-get"):
        return "slurm and munge are not installed and apt-get is not available"
    return None


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory):
    """Start the cluster for the session; stop its daemons by PID afterwards, also on failure."""
    reason = _cannot_run()
    if reason:
        if os.environ.get("INFBENCH_REQUIRE_SLURM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    try:
        subprocess.run(["bash", str(CLUSTER), "up", str(state)], check=True, timeout=1200)
        yield {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(CLUSTER), "down", str(state)], timeout=300)


def test_cluster_runs_a_job(slurm_env, tmp_path):
    out = subprocess.run(
        ["sbatch", "--wait", "-o", str(tmp_path / "job.out"), "--wrap", "echo $SLURM_JOB_ID"],
        env=slurm_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    job_id = out.stdout.split()[-1]
    assert (tmp_path / "job.out").read_text().strip() == job_id


def _running_job(env, rule: str, deadline: float) -> str:
    """The SLURM id of a running job of ``rule`` (the plugin puts the rule in the job comment)."""
    while time.monotonic() < deadline:
        out = subprocess.run(
            ["squeue", "-h", "-t", "RUNNING", "-o", "%i|%k"], env=env, capture_output=True, text=True, timeout=30
        ).stdout
        for line in out.splitlines():
            job_id, comment = line.split("|", 1)
            if rule in comment:
                return job_id
        time.sleep(0.2)
    raise AssertionError(f"no running {rule} job")


def test_pipeline_on_slurm_survives_a_killed_job_and_equals_the_local_run(slurm_env, tiny_run, tmp_path):
    """The tiny pipeline from scratch, every job through sbatch. SLURM kills one sampling job (scancel stands
    for time, memory or a node failure): the failure names the job and its SLURM log, the rerun plans only
    what is not done (nothing upstream of the killed job), and the finished results equal the local run's."""
    baseline, config = tiny_run
    args = [*PROFILE, TABLE_TARGET, "--configfile", str(config)]
    log = tmp_path / "snakemake.out"
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), *args],
            env=slurm_env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            job_id = _running_job(slurm_env, "sample_continuations", time.monotonic() + 600)
            subprocess.run(["scancel", job_id], env=slurm_env, check=True, timeout=60)
            proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = log.read_text()
    assert proc.returncode != 0, output
    assert "Error in rule sample_continuations" in output
    assert ".snakemake/slurm_logs/rule_sample_continuations/" in output and f"{job_id}.log" in output
    sets = [tmp_path / "results/likelihood/smollm2-135m" / s for s in ("search", "verification")]
    killed = [d for d in sets if not (d / "continuations.parquet").exists()]
    assert len(killed) == 1 and not (killed[0] / "sampling.json").exists()
    dry = run_snakemake(tmp_path, "-n", *args, env=slurm_env)
    planned = planned_jobs(dry)
    assert planned["sample_continuations"] == 1 and planned["reference_table"] == 1, planned
    assert set(planned) <= {"sample_continuations", "score_reference", "reference_table"}, planned
    run_snakemake(tmp_path, *args, env=slurm_env)
    print(f"pipeline on SLURM, killed job and rerun: {time.monotonic() - start:.0f} s")
    # From scratch on other processes, through sbatch, with a job killed on the way: the same results and tables.
    assert_same_results(baseline, tmp_path)
    for table in (baseline / "results/tables").glob("*.csv"):
        assert table.read_bytes() == (tmp_path / "results/tables" / table.name).read_bytes()
    # Every job went through sbatch: one SLURM log per rule, and the job's records name it.
    logs = tmp_path / ".snakemake/slurm_logs"
    for rule in RULES:
        assert list((logs / f"rule_{rule}").rglob("*.log")), f"no SLURM log for {rule}\n{output}"
    record = json.loads((tmp_path / "results/likelihood/smollm2-135m/search/reference.json").read_text())
    assert record["provenance"]["execution"]["slurm_job_id"].isdigit()


def test_an_unreachable_cluster_fails_naming_the_job(slurm_env, tmp_path):
    conf = tmp_path / "slurm.conf"
    # The same cluster, but its controller on a port nothing listens on; sbatch gives up at once instead of
    # retrying for about 9 s per submission
    text = open(slurm_env["SLURM_CONF"]).read().replace("SlurmctldPort=", "SlurmctldPort=1") + "MessageTimeout=1\n"
    conf.write_text(text)
    proc = run_snakemake(
        tmp_path,
        "--profile",
        str(REPO / "profiles/slurm"),
        "results/sources/smollm2-135m/source.json",
        "--configfile",
        str(REPO / "config/config.yaml"),
        env={**slurm_env, "SLURM_CONF": str(conf)},
        check=False,
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "Error in rule source_model" in out and "Unable to contact slurm controller" in out
    assert not (tmp_path / "results").exists()
