"""The ingestion rules through Snakemake: a run directory is ingested, a bad one is reported
not ingested without touching the others, and adding a run plans only its jobs and the tables."""

import json

import pytest
import yaml
from conftest import REPO, planned_jobs, run_snakemake
from runs_fixtures import compression_run, serving_run

pytestmark = pytest.mark.slow
TARGET = "results/tables/runs/status.md"


def _config(tmp_path):
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["runs"] = {"dir": str(tmp_path / "runs"), "reference_search": {"enabled": False}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _status(workdir, run):
    return json.loads((workdir / f"results/runs/ingested/{run}/status.json").read_text())


def test_adding_runs_reruns_only_their_jobs_and_the_tables(tmp_path):
    workdir, config = tmp_path / "work", _config(tmp_path)
    workdir.mkdir()
    serving_run(tmp_path / "runs/a")
    run_snakemake(workdir, "--cores", "1", TARGET, "--configfile", config)
    assert _status(workdir, "a")["ingested"]
    a_status = workdir / "results/runs/ingested/a/status.json"
    a_mtime = a_status.stat().st_mtime_ns

    serving_run(tmp_path / "runs/b", concurrencies=(8, 2))
    proc = run_snakemake(workdir, "-n", TARGET, "--configfile", config)
    assert planned_jobs(proc) == {"ingest_run": 1, "runs_analysis": 1}

    bad = serving_run(tmp_path / "runs/c")
    (bad / "replay_log.jsonl").write_text((bad / "replay_log.jsonl").read_text()[:-20])
    run_snakemake(workdir, "--cores", "1", TARGET, "--configfile", config)
    assert _status(workdir, "b")["ingested"]
    status = _status(workdir, "c")
    assert not status["ingested"] and "replay_log.jsonl:3: truncated line" in status["reason"]
    assert a_status.stat().st_mtime_ns == a_mtime
    table = (workdir / "results/tables/runs/concurrency_paths.csv").read_text()
    assert "a,1 > 4 > 8" in table and "b,8 > 1 > 2 > 8,3,8,8,oscillate" in table and "\nc," not in table

    compression_run(tmp_path / "runs/d")
    proc = run_snakemake(workdir, "-n", TARGET, "--configfile", config)
    planned = planned_jobs(proc)
    assert (planned["ingest_run"], planned["measure_candidate"], planned["verify"]) == (1, 1, 1)
    assert "candidate=run-d" in proc.stdout and f"{tmp_path}/runs/d/final/manifest.yaml" in proc.stdout
