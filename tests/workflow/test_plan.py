"""The jobs the embedded default and the quick look plan, per rule: a change of either plan is a diff here."""

import pytest
from conftest import planned_jobs, run_snakemake

# both tracks: the source, its likelihood sets and answers, the candidates measured and verified per task, the
# scripted reference search, ServerBench's calibration, replays and tables
COMMON = {
    "source_model": 1,
    "source_gguf": 1,
    "contexts": 2,
    "sample_continuations": 2,
    "score_reference": 2,
    "reference_table": 1,
    "plot_reference": 1,
    "answers_reference": 1,
    "bf16_package": 1,
    "starter_submission": 1,
    "compression_table": 1,
    "operator_secret": 1,
    "reference_search": 1,
    "ingest_run": 1,
    "runs_analysis": 1,
    "serving_synthetic": 1,
    "serving_workload": 1,
    "serving_coverage": 1,
    "serving_calibrate": 1,
    "serving_table": 1,
    "serving_verified_table": 1,
    "all": 1,
}
EMBEDDED = {
    **COMMON,
    "gguf_baseline": 2,  # Q4_0, Q8_0
    "gguf_imatrix": 1,
    "gguf_imatrix_baseline": 1,  # IQ3_S
    "gptq_baseline": 2,  # one per task
    "gptq_variant": 1,
    "vllm_twin": 2,  # bf16 and the variant through vLLM
    "measure_candidate": 11,  # bf16, starter, 3 GGUF, 2 GPTQ baselines, the variant, 2 vLLM twins, the search's
    "verify": 22,  # 11 candidates x 2 tasks
    "serving_baseline": 1,  # vLLM
    "serving_replay": 3,  # S0, llama.cpp, vLLM
}
QUICK = {
    **COMMON,
    "gguf_baseline": 1,  # Q4_0
    "measure_candidate": 4,  # bf16, starter, Q4_0, the reference search's
    "verify": 8,
    "serving_replay": 2,  # S0, llama.cpp
}


@pytest.mark.parametrize(
    "args, expected", [((), EMBEDDED), (("--configfile", "config/quick.yaml"), QUICK)], ids=["embedded", "quick"]
)
def test_the_plan_per_rule(workdir, args, expected):
    assert planned_jobs(run_snakemake(workdir, "-n", *args)) == expected


def test_a_vllm_twin_of_no_transformers_baseline_stops_planning_naming_the_key(workdir, tmp_path):
    """compression.vllm_twins names baselines whose weights vLLM runs again: a GGUF one is refused at start."""
    import yaml
    from conftest import REPO

    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg["compression"]["vllm_twins"] = ["bf16", "gguf-Q4_0"]
    config = tmp_path / "twins.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = run_snakemake(workdir, "-n", "--configfile", str(config), check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "config key 'compression.vllm_twins.gguf-Q4_0': not a transformers baseline this config builds" in out
    assert "Traceback" not in out
