"""The embedded pipeline for real, at a small size: outputs, reruns, lint, failures."""

import shutil

import pandas as pd
import pytest
import yaml

from conftest import REPO, planned_jobs, run_snakemake

pytestmark = pytest.mark.slow

SMALL = {"contexts_per_set": 4, "context_tokens": 32, "continuation_tokens": 16,
         "sample_batch_size": 4, "score_batch_size": 4, "bootstrap_resamples": 200}


def _config(tmp_path, **likelihood):
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg.pop("serving")  # the serving stages have their own pipeline test (test_serving_pipeline.py)
    cfg["likelihood"].update(SMALL, **likelihood)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pipeline")
    config = _config(workdir)
    run_snakemake(workdir, "--cores", "2", "--configfile", str(config))
    return workdir, config


def test_tables_and_outputs(finished):
    workdir, _ = finished
    table = pd.read_csv(workdir / "results/tables/reference.csv")
    assert list(table["set"]) == ["search", "verification"]
    assert (table["n_params"] == 134_515_008).all()
    assert (table["tokens_scored"] == 4 * 16).all()
    assert ((table["ppl"] > 1) & (table["ppl"] < 1000)).all()
    assert ((table["f_self"] - 1).abs() < 0.02).all()
    assert (workdir / "results/tables/reference.md").read_text().startswith("| source")
    assert (workdir / "results/tables/reference.provenance.json").exists()
    assert (workdir / "results/plots/reference_ppl.png").stat().st_size > 10_000
    assert (workdir / "results/sources/smollm2-135m/f16.gguf").exists()
    for log in ["source_model/smollm2-135m.log", "sample_continuations/smollm2-135m/search.log"]:
        assert (workdir / "logs" / log).exists()


def test_second_run_does_nothing(finished):
    workdir, config = finished
    proc = run_snakemake(workdir, "-n", "--configfile", str(config))
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_seed_change_reruns_sampling_and_downstream_only(finished):
    workdir, _ = finished
    proc = run_snakemake(workdir, "-n", "--configfile", str(_config(workdir, seed=1)))
    assert planned_jobs(proc) == {"sample_continuations": 2, "score_reference": 2, "tables": 1,
                                  "plot_reference": 1, "all": 1}


def test_lint_is_clean(workdir):
    proc = run_snakemake(workdir, "--lint")
    assert "Congratulations, your workflow is in a good condition!" in proc.stdout + proc.stderr


def test_failing_job_leaves_no_output_and_names_the_key(finished, tmp_path):
    workdir, _ = finished
    shutil.copytree(workdir / "results/sources", tmp_path / "results/sources")
    # 8000 + 256 tokens is over SmolLM2's 8,192-token limit
    config = _config(tmp_path, context_tokens=8000, continuation_tokens=256)
    proc = run_snakemake(tmp_path, "results/likelihood/smollm2-135m/contexts.parquet", "--cores", "1",
                         "--configfile", str(config), check=False)
    assert proc.returncode != 0
    log = (tmp_path / "logs/contexts/smollm2-135m.log").read_text()
    assert "likelihood.context_tokens + likelihood.continuation_tokens" in log
    assert not list((tmp_path / "results/likelihood").rglob("*"))
