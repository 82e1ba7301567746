"""config_checks rejects at start what would fail later, naming the config key: a checkpoint source without
llama.cpp's converter (it fails after its download otherwise), and GPU rules without their GPUs."""

from pathlib import Path

import pytest
import yaml

from conftest import PAPER_CONVERTER, REPO, run_snakemake, with_llama_cpp
from infbench import config_checks, resources
from infbench.config_io import load_config
from infbench.errors import ConfigError

MOE = REPO / "config/paper/qwen3.5-122b-a10b.yaml"
DENSE = REPO / "config/paper/qwen3.8-27b.yaml"


def _config(tmp_path: Path, base: Path = MOE, edit=None, **changes) -> dict:
    """``base`` with dotted-key ``changes`` (``"verification.device": "cuda:1"``; None deletes) and ``edit``
    (a function of the raw mapping), validated with defaults as the workflow does."""
    raw = yaml.safe_load(base.read_text())
    if edit:
        edit(raw)
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = raw
        for key in parents:
            node = node.setdefault(key, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_config(path)


@pytest.fixture
def in_workdir(tmp_path, monkeypatch):
    """The working directory the workflow runs in, with the paper configs' converter."""
    monkeypatch.chdir(with_llama_cpp(tmp_path))
    return tmp_path


# (a) llama.cpp's converter for checkpoint sources ----------------------------------------------------------

def test_a_hub_source_needs_the_converter_key(in_workdir):
    config = _config(in_workdir, **{"llama_cpp.convert_hf_to_gguf": None})
    with pytest.raises(ConfigError, match=r"config key 'llama_cpp.convert_hf_to_gguf': source 'qwen3.5-122b-a10b' "
                                          r"is a hub checkpoint 'Qwen/Qwen3.5-122B-A10B', not a GGUF file"):
        config_checks.check(config)


def test_a_missing_converter_script_names_the_key_and_the_path(in_workdir):
    (in_workdir / PAPER_CONVERTER).unlink()
    with pytest.raises(ConfigError, match=r"config key 'llama_cpp.convert_hf_to_gguf': 'llama.cpp/convert_hf_to_gguf.py'"
                                          r" is not a file \(looked at " + str(in_workdir)):
        config_checks.check(_config(in_workdir))


def test_a_local_checkpoint_directory_needs_the_converter_too(in_workdir):
    ckpt = in_workdir / "ckpt"
    ckpt.mkdir()
    origin = {"type": "local", "path": str(ckpt)}
    config = _config(in_workdir, edit=lambda raw: raw["sources"]["qwen3.5-122b-a10b"].update(origin=origin),
                     **{"llama_cpp.convert_hf_to_gguf": None})
    with pytest.raises(ConfigError, match=r"'llama_cpp.convert_hf_to_gguf': source 'qwen3.5-122b-a10b' is a "
                                          r"checkpoint directory"):
        config_checks.check(config)


def test_a_present_converter_and_gguf_sources_pass(in_workdir):
    config_checks.check(_config(in_workdir))
    config_checks.check(load_config(REPO / "config/config.yaml"))  # a GGUF origin: no converter needed


def test_a_paper_config_without_llama_cpp_stops_before_any_job(tmp_path):
    proc = run_snakemake(tmp_path, "-n", "--configfile", str(DENSE), check=False)
    assert proc.returncode != 0
    assert "config key 'llama_cpp.convert_hf_to_gguf': 'llama.cpp/convert_hf_to_gguf.py' is not a file" in \
        proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


# (b) GPU rules without GPUs ------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["verification.device", "answers.device"])
def test_a_gpu_outside_the_allocation_names_the_key(key, tmp_path):
    with pytest.raises(ConfigError, match=rf"config key '{key}': 'cuda:1': a job sees only the GPUs it is given"):
        config_checks.check_gpus(_config(tmp_path, **{key: "cuda:1"}))


def test_likelihood_on_gpu_1_names_the_key(tmp_path):
    config = _config(tmp_path, **{"likelihood.backend": "transformers", "likelihood.device": "cuda:1"})
    with pytest.raises(ConfigError, match=r"config key 'likelihood.device': 'cuda:1'"):
        config_checks.check_gpus(config)


def test_vllm_on_fewer_gpus_than_the_source_needs(tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'likelihood.tensor_parallel': 1 GPU\(s\) per vLLM engine, but "
                                          r"source 'qwen3.5-122b-a10b' needs 2 .*sources.qwen3.5-122b-a10b.devices"):
        config_checks.check_gpus(_config(tmp_path, **{"likelihood.tensor_parallel": 1}))


@pytest.mark.parametrize("rule, override, key, needed", [
    ("measure_candidate", {"gpu": 0}, "verification.device", 2),
    ("answers_reference", {"gres": "gpu:h200:1"}, "answers.device", 2),
    ("sample_continuations", {"gpu": 1}, "likelihood.tensor_parallel", 2),
    ("score_reference", {"gres": "gpu:1"}, "likelihood.tensor_parallel", 2),
    ("gptq_baseline", {"gpu": 0}, "compression.gptq.device", 1),
])
def test_set_resources_that_take_a_cuda_rules_gpus(rule, override, key, needed, tmp_path):
    given = resources.requested_gpus(override)
    with pytest.raises(ConfigError, match=rf"config key '{key}': rule {rule} \(source 'qwen3.5-122b-a10b'\) needs "
                                          rf"{needed} GPU\(s\) but set-resources gives it {given}"):
        config_checks.check_gpus(_config(tmp_path), {rule: override})


def test_a_gpu_limit_below_a_rules_need(tmp_path):
    with pytest.raises(ConfigError, match=r"config key 'likelihood.tensor_parallel': .* needs 2 GPU\(s\) but "
                                          r"--resources allows gpu=1"):
        config_checks.check_gpus(_config(tmp_path), limit=1)
    config_checks.check_gpus(_config(tmp_path, DENSE), limit=1)


def test_gpu_overrides_that_leave_enough_or_cpu_rules_pass(tmp_path):
    config_checks.check_gpus(_config(tmp_path), {"measure_candidate": {"gpu": 4, "mem_mb": 1},
                                                 "source_model": {"gpu": 0}, "no_such_rule": {"gpu": 0}})
    # On cpu or auto a rule asks for no GPU; overriding that to 0 is no error.
    embedded = load_config(REPO / "config/config.yaml")
    config_checks.check_gpus(embedded, {rule: {"gpu": 0} for rule in resources.GPU_RULES}, limit=0)
    # GPTQ on auto: GPTQModel takes a GPU if the job is given one.
    config_checks.check_gpus(_config(tmp_path, **{"compression.gptq.device": "auto"}), {"gptq_baseline": {"gpu": 0}})
