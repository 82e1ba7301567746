"""Scheduler resources: GPU counts from the config, every rule sized, the paper profile
asks SLURM for the GPUs its sources need, and jobs refuse to run without them."""

import re

import pytest
import yaml

from conftest import REPO, run_snakemake
from infbench.compression.likelihood import check_devices
from infbench.errors import ConfigError
from infbench.resources import likelihood_gpus


@pytest.mark.parametrize("likelihood, gpus", [
    ({"backend": "vllm", "device": "cuda", "tensor_parallel": 2}, 2),
    ({"backend": "vllm", "device": "auto", "tensor_parallel": 1}, 1),
    ({"backend": "transformers", "device": "cuda", "tensor_parallel": 1}, 1),
    ({"backend": "transformers", "device": "cuda:0", "tensor_parallel": 1}, 1),
    ({"backend": "transformers", "device": "cpu", "tensor_parallel": 1}, 0),
    ({"backend": "transformers", "device": "auto", "tensor_parallel": 1}, 0),
])
def test_likelihood_gpus(likelihood, gpus):
    assert likelihood_gpus(likelihood) == gpus


def test_a_gpu_index_outside_the_allocation_names_the_key():
    with pytest.raises(ConfigError, match="likelihood.device"):
        likelihood_gpus({"backend": "transformers", "device": "cuda:1", "tensor_parallel": 1})


@pytest.mark.parametrize("backend, device, key", [("transformers", "cuda", "likelihood.device"),
                                                  ("vllm", "cuda", "likelihood.tensor_parallel")])
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
    proc = run_snakemake(workdir, "-n", "--forceall")
    jobs = _job_resources(proc.stdout)
    assert set(jobs) >= {"source_model", "source_gguf", "contexts", "sample_continuations", "score_reference",
                         "tables", "plot_reference"}
    for rule, found in jobs.items():
        if rule == "all":
            continue
        for resources in found:
            assert int(resources["mem_mb"]) > 0 and int(resources["runtime"]) > 0, rule
            assert int(resources["gpu"]) == 0 if "gpu" in resources else True, rule


@pytest.mark.parametrize("paper, gpus", [("qwen3.5-122b-a10b", 2), ("nemotron-3.5-120b-a12b", 2),
                                         ("qwen3.8-27b", 1)])
def test_slurm_paper_dry_run_asks_for_the_sources_gpus(paper, gpus, tmp_path):
    configfile = REPO / f"config/paper/{paper}.yaml"
    assert yaml.safe_load(configfile.read_text())["likelihood"]["device"] == "cuda"
    proc = run_snakemake(tmp_path, "-n", "--profile", str(REPO / "profiles/slurm"), "--workflow-profile",
                         str(REPO / "profiles/paper"), "--configfile", str(configfile))
    jobs = _job_resources(proc.stdout)
    paper_profile = yaml.safe_load((REPO / "profiles/paper/config.yaml").read_text())["set-resources"]
    for rule in ["sample_continuations", "score_reference"]:
        assert len(jobs[rule]) == 2
        for resources in jobs[rule]:
            assert int(resources["gpu"]) == gpus
            assert int(resources["mem_mb"]) == paper_profile[rule]["mem_mb"]
            assert int(resources["runtime"]) == paper_profile[rule]["runtime"]
    for rule in ["source_model", "contexts", "tables"]:
        assert all("gpu" not in r for r in jobs[rule]), rule
