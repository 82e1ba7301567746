"""What the jobs need from outside the repository does not stop planning: a paper config whose llama.cpp
converter is missing plans in a fresh clone (one line names the key), and its ``source_model`` job, which
checks the converter before it downloads, fails naming the key (each check's cases are in
tests/config/test_config_model.py)."""

import pytest
from conftest import REPO, run_snakemake

from infbench import preflight, sources
from infbench.config import files
from infbench.errors import ConfigError

PAPER = sorted((REPO / "config/paper").glob("*.yaml"))


@pytest.mark.parametrize("config", PAPER, ids=[p.stem for p in PAPER])
def test_a_paper_config_plans_without_llama_cpp_naming_it_in_one_line(tmp_path, config):
    proc = run_snakemake(tmp_path, "-n", "--configfile", str(config), check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    notes = [line for line in proc.stderr.splitlines() if line.startswith("infbench: note:")]
    assert len(notes) == 1, proc.stderr[-3000:]
    assert f"{config}: config key 'llama_cpp.convert_hf_to_gguf'" in notes[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / ".snakemake"]  # a dry run writes no result


def test_the_job_needing_the_converter_checks_it_before_the_download(tmp_path, monkeypatch):
    """``source_model``'s first step (workflow/scripts/source_model.py), before ``sources.materialize``."""
    monkeypatch.chdir(tmp_path)
    cfg = files.load(REPO / "config/paper/qwen3.8-27b.yaml")
    (name, source), *_ = cfg.sources.items()
    with pytest.raises(ConfigError, match=r"'llama_cpp.convert_hf_to_gguf': 'llama.cpp/convert_hf_to_gguf.py' is not"):
        sources.gguf_converter(cfg.llama_cpp.convert_hf_to_gguf, name, source.origin)
    script = tmp_path / "llama.cpp/convert_hf_to_gguf.py"
    script.parent.mkdir()
    script.write_text("")
    sources.gguf_converter(cfg.llama_cpp.convert_hf_to_gguf, name, source.origin)
    assert preflight.outside(cfg) == []
