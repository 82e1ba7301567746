"""The serving stages of the embedded pipeline: planned jobs, config errors, and a tiny real run."""

import json
import re

import pandas as pd
import pytest
import yaml
from conftest import REPO, planned_jobs, run_snakemake

from infbench.vllm_env import vllm_python

SERVING_TARGETS = ["results/tables/serving.md", "results/serving/coverage.csv"]


def _config(tmp_path, **changes):
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    for dotted, value in changes.items():
        node = cfg
        *path, last = dotted.split(".")
        for k in path:
            node = node.setdefault(k, {})
        node[last] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_embedded_plan(tmp_path):
    proc = run_snakemake(tmp_path, "-n", *SERVING_TARGETS, "--configfile", str(_config(tmp_path)))
    jobs = planned_jobs(proc)
    assert {k: v for k, v in jobs.items() if k.startswith("serving")} == {
        "serving_synthetic": 1,
        "serving_workload": 1,
        "serving_coverage": 1,
        "serving_calibrate": 1,
        "serving_baseline": 1,  # vLLM
        "serving_replay": 3,  # S0, llama.cpp, vLLM
        "serving_table": 1,
    }


def test_the_development_table_replays_the_development_seeds_only(tmp_path):
    """Final seeds are held out for verification: the development table's replays never use them."""
    config = _config(
        tmp_path,
        **{
            "serving.seeds.development": [3, 4],
            "serving.seeds.final": [1000, 1001],
            "serving.submissions": [str(REPO / "examples/servers")],
        },
    )
    proc = run_snakemake(tmp_path, "-n", "results/tables/serving.md", "--configfile", str(config))
    replays = set(re.findall(r"results/serving/replays/(\w+)/seed(\d+)\.json", proc.stdout))
    assert replays == {(s, d) for s in ("S0", "llamacpp", "vllm") for d in ("3", "4")}
    proc = run_snakemake(tmp_path, "-n", "results/tables/serving_verified.md", "--configfile", str(config))
    assert "results/serving/replays/" not in proc.stdout and planned_jobs(proc)["serving_verify"] == 2


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"serving.calibration.reference": "tgi"}, "config key 'serving.calibration.reference': unknown server 'tgi'"),
        ({"serving.seeds.final": [0]}, "config key 'serving.seeds."),
        (
            {
                "serving.servers": {
                    n: {"command": ["x", "{nope}" if n == "S0" else "y"]} for n in ("S0", "llamacpp", "vllm")
                }
            },
            "config key 'serving.servers.S0.command': bad placeholder",
        ),
        ({"serving.source": "gpt"}, "config key 'serving.source': unknown source 'gpt'"),
        (
            {"serving.replay.start_ratio": [0.8, 0.2]},
            "config key 'serving.replay.start_ratio': [0.8, 0.2] is not a range",
        ),
    ],
)
def test_bad_serving_config_stops_before_any_job(tmp_path, changes, message):
    proc = run_snakemake(
        tmp_path, "-n", *SERVING_TARGETS, "--configfile", str(_config(tmp_path, **changes)), check=False
    )
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr


@pytest.mark.slow
def test_tiny_serving_run(tmp_path):
    """Calibration, a baseline engine scored with the reference's targets (S0 here: vLLM's start alone outlasts
    these windows), the development replays, coverage and the table."""
    config = _config(
        tmp_path,
        **{
            "serving.calibration.baselines": ["S0"],
            "serving.systems": [{"server": "S0", "concurrency": 1}, {"server": "llamacpp", "concurrency": "reference"}],
            "serving.replay.warmup_s": 1,
            "serving.replay.window_s": 8,
            "serving.replay.request_timeout_s": 6,
            "serving.seeds.calibration": [2000, 2001],
            "serving.calibration.concurrencies": [1, 2],
            "serving.workload.synthetic.sessions": 16,
        },
    )
    run_snakemake(tmp_path, "--cores", "2", *SERVING_TARGETS, "--configfile", str(config))
    targets = json.loads((tmp_path / "results/serving/calibration/targets.json").read_text())
    assert targets["targets"]["tau_first_s"] >= max(r["p90_ttft_s"] for r in targets["runs"]) > 0
    assert targets["concurrency"] in (1, 2) and len(targets["runs"]) == 2
    table = pd.read_csv(tmp_path / "results/tables/serving.csv")
    assert list(table["system"]) == [
        "llamacpp (calibration baseline)",
        "S0 (calibration baseline)",
        "S0",
        "llamacpp",
    ]
    baseline = json.loads((tmp_path / "results/serving/calibration/baseline_S0.json").read_text())
    assert baseline["concurrency"] in (1, 2) and len(baseline["runs"]) == 2
    assert baseline["targets_key"] == targets["key"]
    assert (table["d_ci95_low"] <= table["d_ci95_high"]).all() and (table["g_ci95_low"] <= table["g_ci95_high"]).all()
    assert (table["d_ci95_high"] <= table["g_ci95_high"] + 1e-12).all() and (table["counts"] == "token ids").all()
    shown = table["D"].notna()  # a D only with enough completed timed requests; the row says why otherwise
    assert (table.loc[shown, "completed_timed_requests"] >= 30).all()
    assert table.loc[~shown, "D_at_c"].str.startswith("too few requests").all()
    assert (tmp_path / "results/plots/serving_value_share.png").stat().st_size > 5_000
    points = pd.read_csv(tmp_path / "results/plots/serving_value_share.csv")  # the figure's points
    assert list(points["role"]) == ["calibration baseline", "system", "system"]
    assert list(points["completed_requests"]) == list(table["completed_timed_requests"].drop(1))
    assert 0 <= table["f"][0] <= 1  # the baseline's share (mean over its seeds of D / G)
    cov = pd.read_csv(tmp_path / "results/serving/coverage.csv")
    assert (cov["seed_set"] == "scan").sum() == 128 and cov["pct_input_tokens"].notna().sum() == 4  # 1 + 1 + 2 seeds
    for log in [
        "servers/calibrate.log",
        "servers/baseline_S0.log",
        "servers/S0_seed0.log",
        "servers/llamacpp_seed0.log",
    ]:
        assert (tmp_path / "logs/serving" / log).stat().st_size > 0
    proc = run_snakemake(tmp_path, "-n", *SERVING_TARGETS, "--configfile", str(config))
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_paper_defaults_plan_gpu_engines(tmp_path):
    """Schema defaults (the paper's): SGLang reference, S0 + SGLang scored; GPU specs render but never run here."""
    trace = tmp_path / "weka.jsonl"
    trace.write_text('{"id": "a", "block_size": 64, "requests": [{"t": 0, "in": 64, "out": 8, "hash_ids": [0]}]}\n')
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["serving"] = {"source": "smollm2-135m", "workload": {"trace": {"format": "weka", "path": str(trace)}}}
    path = tmp_path / "paper.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = run_snakemake(tmp_path, "-n", *SERVING_TARGETS, "--configfile", str(path))
    jobs = planned_jobs(proc)
    assert jobs["serving_replay"] == 2 * 5 and jobs["serving_calibrate"] == 1 and "serving_synthetic" not in jobs

    from infbench.serving import servers

    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    specs = schema["properties"]["serving"]["properties"]["servers"]["default"]
    launch = servers.LaunchVars(model_dir="/m", devices=2, context_limit=1048576)
    spec = servers.ServerSpec.model_validate(specs["sglang"])  # SGLang 0.5.23 needs torch 2.14.1 and CUDA
    assert not spec.runnable and "--port 8000" in servers.dry_run("sglang", spec, launch)
    with pytest.raises(Exception, match="validated only"):
        with servers.launched("sglang", spec, launch, tmp_path / "sglang.log"):
            pass
    assert servers.dry_run("vllm", servers.ServerSpec.model_validate(specs["vllm"]), launch).startswith(
        f"{vllm_python()} -m vllm.entrypoints.openai.api_server"
    )
    assert "--tensor-parallel-size 2" in servers.dry_run(
        "vllm", servers.ServerSpec.model_validate(specs["vllm"]), launch
    )
