"""The start-of-run checks stop the workflow before any job, naming the key (each check's cases are in
tests/config/test_config_model.py): a paper config whose llama.cpp converter is missing would otherwise fail after
the hub download."""

from conftest import REPO, run_snakemake

DENSE = REPO / "config/paper/qwen3.8-27b.yaml"


def test_a_paper_config_without_llama_cpp_stops_before_any_job(tmp_path):
    proc = run_snakemake(tmp_path, "-n", "--configfile", str(DENSE), check=False)
    assert proc.returncode != 0
    assert (
        "config key 'llama_cpp.convert_hf_to_gguf': 'llama.cpp/convert_hf_to_gguf.py' is not a file"
        in proc.stdout + proc.stderr
    )
    assert not (tmp_path / "results").exists()
