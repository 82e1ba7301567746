"""Every benchmark command the docs show (``infbench bench-*``, ``infbench stage-times``), run at tiny size:
each prints its table. What they measure is in docs/stages.md and docs/gpu.md; no timing is asserted."""

import re

import pytest
import yaml
from conftest import REPO, tiny_config

from infbench.cli import main


def test_stage_times_reads_a_runs_benchmarks_into_stages(tiny_run, capsys):
    workdir, _ = tiny_run
    assert main(["stage-times", "--benchmarks", str(workdir / "benchmarks")]) == 0
    out = capsys.readouterr().out
    assert "source: Source models" in out and "likelihood: The BF16 reference likelihood" in out
    assert "| reference_table" in out and "all stages" in out


def test_bench_likelihood_on_a_tiny_checkpoint(tiny_source, capsys, tmp_path):
    out_md = tmp_path / "likelihood.md"
    assert (
        main(
            [
                "bench-likelihood",
                str(tiny_source / "hf"),
                "--contexts",
                "2",
                "--context-tokens",
                "8",
                "--continuation-tokens",
                "8",
                "--batch-sizes",
                "2",
                "--repeats",
                "1",
                "--device",
                "cpu",
                "--dtype",
                "float32",
                "--out",
                str(out_md),
            ]
        )
        == 0
    )
    assert out_md.read_text().strip() in capsys.readouterr().out


def test_bench_replay_against_the_instant_server(capsys):
    assert (
        main(
            [
                "bench-replay",
                "--concurrency",
                "1",
                "2",
                "--window",
                "1",
                "--input-tokens",
                "16",
                "--output-tokens",
                "4",
                "--think-time",
                "0.1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "added_ttft_p50_ms" in out and "client_cpu_pct" in out


@pytest.mark.slow
def test_bench_stages_runs_the_pipelines_stages_and_compares_two_runs(tiny_run, tmp_path, capsys):
    """The likelihood stages of the tiny pipeline on the CPU, compared with the tiny run (the same config on
    the same machine: the same tokens, so every figure agrees)."""
    workdir, config = tiny_run
    out = tmp_path / "stages"
    assert (
        main(
            [
                "bench-stages",
                "--config",
                str(config),
                "--device",
                "cpu",
                "--out-dir",
                str(out),
                "--likelihood-only",
                "--compare",
                str(workdir),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "likelihood: The BF16 reference likelihood" in text
    assert re.search(r"search: continuations identical in a and b \(share of contexts\)\s+\|\s+1\s+\|", text), text
    assert re.search(r"verification: reference PPL\s+\|\s+([0-9.]+)\s+\|\s+\1\s+\|", text), text
    written = yaml.safe_load((out / "config.yaml").read_text())
    assert written["likelihood"]["device"] == "cpu" and "serving" not in written


@pytest.mark.slow
def test_bench_noop_rerun_times_planning_an_up_to_date_workflow(tmp_path, capsys):
    assert (
        main(
            [
                "bench-noop-rerun",
                "--workflow",
                str(REPO),
                "--config",
                str(tiny_config(tmp_path / "c.yaml")),
                "--workdir",
                str(tmp_path / "work"),
                "--repeats",
                "1",
            ]
        )
        == 0
    )
    assert "snakemake -n" in capsys.readouterr().out
