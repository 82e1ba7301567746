"""Scheduler resources: GPU counts from the config, every rule sized, the paper profile
asks SLURM for the GPUs its sources need, and jobs refuse to run without them."""

import os
import re

import pytest
import yaml
from conftest import REPO, run_snakemake, with_llama_cpp

from infbench.compression.likelihood import check_devices
from infbench.config.files import load as load_config
from infbench.config.model import LikelihoodSettings
from infbench.errors import ConfigError
from infbench.resources import GPU_RULES, job_gpus, likelihood_gpus


@pytest.mark.parametrize(
    "likelihood, gpus",
    [
        ({"backend": "vllm", "device": "cuda", "tensor_parallel": 2}, 2),
        ({"backend": "vllm", "device": "auto", "tensor_parallel": 1}, 1),
        ({"backend": "transformers", "device": "cuda", "tensor_parallel": 1}, 1),
        ({"backend": "transformers", "device": "cuda:0", "tensor_parallel": 1}, 1),
        ({"backend": "transformers", "device": "cpu", "tensor_parallel": 1}, 0),
        ({"backend": "transformers", "device": "auto", "tensor_parallel": 1}, 0),
    ],
)
def test_likelihood_gpus(likelihood, gpus):
    assert likelihood_gpus(LikelihoodSettings(**likelihood)) == gpus


def test_transformers_on_cuda_asks_for_the_gpus_that_hold_the_source():
    assert (
        likelihood_gpus(
            LikelihoodSettings(**{"backend": "transformers", "device": "cuda", "tensor_parallel": 1}), devices=2
        )
        == 2
    )
    assert (
        likelihood_gpus(
            LikelihoodSettings(**{"backend": "transformers", "device": "auto", "tensor_parallel": 1}), devices=2
        )
        == 0
    )


def test_job_gpus_of_the_embedded_default_are_none():
    config = load_config(REPO / "config/config.yaml")
    assert {rule: job_gpus(config, rule, "smollm2-135m") for rule in GPU_RULES} == dict.fromkeys(GPU_RULES, 0)


def test_a_gpu_index_outside_the_allocation_names_the_key():
    with pytest.raises(ConfigError, match="likelihood.device"):
        likelihood_gpus(LikelihoodSettings(**{"backend": "transformers", "device": "cuda:1", "tensor_parallel": 1}))


@pytest.mark.parametrize(
    "backend, device, key",
    [("transformers", "cuda", "likelihood.device"), ("vllm", "cuda", "likelihood.tensor_parallel")],
)
def test_a_job_without_its_gpus_stops_naming_the_key(backend, device, key, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match=re.escape(key) + ".*CUDA_VISIBLE_DEVICES="):
        check_devices(backend, device, tensor_parallel=2)


def _job_resources(stdout: str) -> dict[str, list[dict[str, str]]]:
    """rule -> the resources of each of its jobs, from a dry run's job listing."""
    jobs, rule = {}, None
    for line in stdout.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = m.group(1)
        elif rule and (m := re.match(r"^\s+resources: (.*)$", line)):
            jobs.setdefault(rule, []).append(dict(kv.split("=", 1) for kv in m.group(1).split(", ")))
    return jobs


def test_every_rule_declares_memory_and_runtime(workdir):
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    config["serving"]["calibration"]["baselines"] = ["S0"]  # the embedded default scores no baseline engine
    (path := workdir / "with_baseline.yaml").write_text(yaml.safe_dump(config))
    proc = run_snakemake(workdir, "-n", "--forceall", "--configfile", str(path))
    jobs = _job_resources(proc.stdout)
    assert set(jobs) >= {
        "source_model",
        "source_gguf",
        "contexts",
        "sample_continuations",
        "score_reference",
        "reference_table",
        "plot_reference",
    }
    for rule, found in jobs.items():
        if rule == "all":
            continue
        for resources in found:
            assert int(resources["mem_mb"]) > 0 and int(resources["runtime"]) > 0, rule
            # the rules that may run on GPUs ask for none on the embedded default; the others never ask
            assert resources.get("gpu") == ("0" if rule in GPU_RULES else None), (rule, resources)
    assert set(GPU_RULES) - {"serving_verify"} <= set(jobs)  # no server submission in the embedded default


# The paper's sources: parameters (BF16: 2 bytes each) and the GPUs that hold them in BF16 (sources.*.devices).
PAPER_SOURCES = {"qwen3.5-122b-a10b": (122e9, 2), "nemotron-3.5-120b-a12b": (120e9, 2), "qwen3.8-27b": (27e9, 1)}
H200_BYTES = 141e9
PAPER_PROFILE = yaml.safe_load((REPO / "profiles/paper/config.yaml").read_text())
# Rules whose runtime follows the config (verification.timeout_s, serving.replay), not the profile.
RUNTIME_FROM_CONFIG = {
    "measure_candidate",
    "reference_search",
    "serving_calibrate",
    "serving_baseline",
    "serving_replay",
    "serving_verify",
}
# Rules that hold the whole BF16 source (on their GPUs, and at some point in host memory).
HOLD_THE_SOURCE = [
    "source_model",
    "sample_continuations",
    "score_reference",
    "answers_reference",
    "measure_candidate",
    "gptq_baseline",
    "gptq_variant",
    "gguf_imatrix",
]
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "",
}


@pytest.mark.parametrize("paper", sorted(PAPER_SOURCES))
def test_job_gpus_follow_the_paper_configs(paper, tmp_path, monkeypatch):
    monkeypatch.chdir(with_llama_cpp(tmp_path))  # the paper configs' converter, checked at load
    config = load_config(REPO / f"config/paper/{paper}.yaml")
    devices = PAPER_SOURCES[paper][1]
    per_source = {rule: job_gpus(config, rule, paper) for rule in GPU_RULES if not rule.startswith("serving_")}
    assert per_source == {
        "sample_continuations": devices,
        "score_reference": devices,
        "gptq_baseline": 1,
        "gptq_variant": 1,
        "gguf_imatrix": devices,
        "answers_reference": devices,
        "measure_candidate": devices,
        "reference_search": devices,
    }
    assert job_gpus(config, "source_model", paper) == 0


def _workflow_rules() -> set[str]:
    return {
        m.group(1)
        for f in (REPO / "workflow/rules").glob("*.smk")
        for m in re.finditer(r"^\s*rule (\w+):", f.read_text(), re.MULTILINE)
    }


def test_the_paper_profile_sizes_every_rule():
    rules = _workflow_rules()
    assert {"gptq_baseline", "measure_candidate", "answers_reference", "reference_search"} <= rules
    assert set(PAPER_PROFILE["set-resources"]) == rules
    assert set(PAPER_PROFILE["set-threads"]) == rules
    for rule, res in PAPER_PROFILE["set-resources"].items():
        assert res["mem_mb"] > 0, rule
        assert ("runtime" in res) == (rule not in RUNTIME_FROM_CONFIG), rule
        assert "gpu" not in res and "gres" not in res, f"{rule}: GPU counts follow the config"


def _dry_run_jobs(stdout: str) -> dict[str, list[dict[str, str]]]:
    """rule -> each planned job's resources, with its threads."""
    jobs, rule, threads = {}, None, "1"
    for line in stdout.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):$", line):
            rule, threads = m.group(1), "1"
        elif rule and (m := re.match(r"^\s+threads: (\d+)$", line)):
            threads = m.group(1)
        elif rule and (m := re.match(r"^\s+resources: (.*)$", line)):
            res = dict(kv.split("=", 1) for kv in m.group(1).split(", "))
            jobs.setdefault(rule, []).append({**res, "threads": threads})
    return jobs


@pytest.mark.parametrize("paper", sorted(PAPER_SOURCES))
def test_slurm_paper_dry_run_asks_for_the_sources_gpus(paper, tmp_path):
    """`snakemake -n --profile profiles/slurm --workflow-profile profiles/paper` plans each paper config, offline
    (no download at start), with every job sized by the profile and the model-running jobs on the source's GPUs."""
    params, devices = PAPER_SOURCES[paper]
    configfile = REPO / f"config/paper/{paper}.yaml"
    config = yaml.safe_load(configfile.read_text())
    assert config["sources"][paper]["devices"] == devices and config["likelihood"]["tensor_parallel"] == devices
    # A dry run caps threads at --cores (1 without it); a SLURM run gives each job its rule's threads.
    proc = run_snakemake(
        with_llama_cpp(tmp_path),
        "-n",
        "--cores",
        "128",
        "--profile",
        str(REPO / "profiles/slurm"),
        "--workflow-profile",
        str(REPO / "profiles/paper"),
        "--configfile",
        str(configfile),
        env={**os.environ, **OFFLINE},
    )
    jobs = _dry_run_jobs(proc.stdout)
    assert not (tmp_path / "results").exists()
    assert {
        r: len(j)
        for r, j in jobs.items()
        if r in ("sample_continuations", "score_reference", "gptq_baseline", "answers_reference")
    } == {"sample_continuations": 2, "score_reference": 2, "gptq_baseline": 2, "answers_reference": 1}
    # bf16, starter, Q4_0, IQ3_S, IQ3_S with the importance matrix (and IQ2_XS for the dense source), a GPTQ
    # package per task, the five GPTQ pilot variants
    assert len(jobs["measure_candidate"]) == (13 if paper == "qwen3.8-27b" else 12)
    assert len(jobs["gptq_variant"]) == 5 and len(jobs["gguf_imatrix"]) == 1
    profile = PAPER_PROFILE["set-resources"]
    for rule, found in jobs.items():
        if rule == "all":
            continue
        for res in found:
            assert int(res["mem_mb"]) == profile[rule]["mem_mb"], rule
            assert int(res["threads"]) == PAPER_PROFILE["set-threads"][rule], rule
            if rule in RUNTIME_FROM_CONFIG:
                assert int(res["runtime"]) >= 60, rule
            else:
                assert int(res["runtime"]) == profile[rule]["runtime"], rule
    bf16 = 2 * params
    for rule in HOLD_THE_SOURCE:
        for res in jobs[rule]:
            assert int(res["mem_mb"]) * 1e6 >= bf16, f"{rule}: host memory below the BF16 source"
    for rule in ["sample_continuations", "score_reference", "answers_reference", "measure_candidate", "gguf_imatrix"]:
        for res in jobs[rule]:
            assert int(res["gpu"]) == devices, rule
            assert int(res["gpu"]) * H200_BYTES >= bf16, f"{rule}: the BF16 source does not fit its GPUs"
    assert all(int(r["gpu"]) == 1 for r in jobs["gptq_baseline"] + jobs["gptq_variant"])  # one layer at a time
    for rule in [
        "source_model",
        "source_gguf",
        "contexts",
        "gguf_baseline",
        "gguf_imatrix_baseline",
        "bf16_package",
        "reference_table",
        "verify",
    ]:
        assert all(int(r.get("gpu", 0)) == 0 for r in jobs[rule]), rule


@pytest.mark.parametrize(
    "override, key",
    [
        ("measure_candidate:gpu=0", "verification.device"),
        ("sample_continuations:gpu=1", "likelihood.tensor_parallel"),
        ("gptq_baseline:gpu=0", "compression.gptq.device"),
    ],
)
def test_a_profile_that_takes_a_cuda_rules_gpus_stops_at_start(override, key, tmp_path):
    proc = run_snakemake(
        with_llama_cpp(tmp_path),
        "-n",
        "--profile",
        str(REPO / "profiles/slurm"),
        "--workflow-profile",
        str(REPO / "profiles/paper"),
        "--set-resources",
        override,
        "--configfile",
        str(REPO / "config/paper/qwen3.5-122b-a10b.yaml"),
        check=False,
    )
    assert proc.returncode != 0
    rule = override.split(":")[0]
    assert f"config key '{key}': rule {rule} (source 'qwen3.5-122b-a10b') needs" in proc.stdout + proc.stderr
