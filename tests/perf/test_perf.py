"""Every benchmark command the docs show (``infbench bench-*``, ``infbench stage-times``), run at tiny size:
each prints its table. What they measure is in docs/stages.md and docs/gpu.md; no timing is asserted."""

import re

import pytest
import yaml
from conftest import REPO, tiny_config

from infbench.cli import main


def _table(text: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``text``, as column -> cell."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header, *rows = ([cell.strip() for cell in line.strip("|").split("|")] for line in lines)
    return [dict(zip(header, row, strict=True)) for row in rows if not set(row[0]) <= set("-:")]


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
    text = out_md.read_text()
    assert text.strip() in capsys.readouterr().out
    rows = {row["what"]: row for row in _table(text)}
    assert set(rows) == {"bare forward, batch 2", "scorer, batch 2", "sampling, batch 2 (new tokens)"}
    assert all(float(row["tokens_per_s"]) > 0 and float(row["seconds"]) > 0 for row in rows.values())
    assert rows["sampling, batch 2 (new tokens)"]["tokens"] == "16"  # 2 contexts x 8 new tokens
    assert float(rows["scorer, batch 2"]["vs"]) > 0 and float(rows["sampling, batch 2 (new tokens)"]["vs"]) > 0
    # float32 on the CPU: the scorer's log-probs are the same arithmetic as the reference's
    assert float(re.search(r"max \|diff\| (\S+)\n", text).group(1)) < 1e-4


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
    rows = _table(capsys.readouterr().out)
    assert [row["concurrency"] for row in rows] == ["1", "2"]
    for row in rows:
        assert row["failed"] == "0" and int(row["requests"]) > 0 and float(row["requests_per_s"]) > 0
        assert 0 < float(row["added_ttft_p50_ms"]) <= float(row["added_ttft_p99_ms"])
        assert 0 < float(row["send_to_server_p50_ms"]) <= float(row["send_to_server_p99_ms"])
        assert 0 <= float(row["client_cpu_pct"]) <= 100 * 64


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
                "2",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "snakemake -n" in text
    rows = _table(text)
    assert [row["run"] for row in rows] == ["1", "2"] and all(row["nothing to be done"] == "True" for row in rows)
    assert all(float(row["seconds"]) > 0 for row in rows)
