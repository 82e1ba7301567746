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

from conftest import REPO, TABLE_TARGET, assert_same_results, run_snakemake

pytestmark = pytest.mark.slow

CLUSTER = REPO / "tests/slurm/cluster.sh"
RULES = ["source_model", "contexts", "sample_continuations", "score_reference", "tables"]


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
    out = subprocess.run(["sbatch", "--wait", "-o", str(tmp_path / "job.out"), "--wrap", "echo $SLURM_JOB_ID"],
                         env=slurm_env, capture_output=True, text=True, timeout=120, check=True)
    job_id = out.stdout.split()[-1]
    assert (tmp_path / "job.out").read_text().strip() == job_id


def test_pipeline_on_slurm_equals_the_local_run(slurm_env, tiny_run, tmp_path):
    baseline, config = tiny_run
    start = time.monotonic()
    proc = run_snakemake(tmp_path, "--profile", str(REPO / "profiles/slurm"), TABLE_TARGET,
                         "--configfile", str(config), env=slurm_env)
    print(f"pipeline on SLURM: {time.monotonic() - start:.0f} s")
    assert_same_results(baseline, tmp_path)
    # Every job went through sbatch: one SLURM log per job, and the job's records name it.
    logs = tmp_path / ".snakemake/slurm_logs"
    for rule in RULES:
        assert list((logs / f"rule_{rule}").rglob("*.log")), f"no SLURM log for {rule}\n{proc.stderr}"
    record = json.loads((tmp_path / "results/likelihood/smollm2-135m/search/reference.json").read_text())
    assert record["provenance"]["execution"]["slurm_job_id"].isdigit()
