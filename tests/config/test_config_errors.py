"""A bad config is one line naming the config file and the key, what is allowed there and, for a misspelt
key, the key meant (issue 40, item 1): through the workflow (a dry run) and `infbench check-config`, which
also names the line of a YAML syntax error (Snakemake reads --configfile before the workflow)."""

import subprocess

import pytest
import yaml
from conftest import INFBENCH, REPO, run_snakemake


def _embedded() -> dict:
    return yaml.safe_load((REPO / "config/config.yaml").read_text())


def _top(cfg: dict) -> dict:
    cfg["likelihod"] = cfg.pop("likelihood")
    return cfg


def _nested(cfg: dict) -> dict:
    cfg["likelihood"]["contxt_tokens"] = cfg["likelihood"].pop("context_tokens")
    return cfg


def _enum(cfg: dict) -> dict:
    cfg["likelihood"]["backend"] = "onnx"
    return cfg


# name -> (change, the message after the file name)
BAD = {
    "misspelt section": (
        _top,
        "config key 'likelihod': unknown key (allowed here: sources, llama_cpp, likelihood,",
        "did you mean 'likelihood'?",
    ),
    "misspelt nested key": (
        _nested,
        "config key 'likelihood.contxt_tokens': unknown key (allowed here: corpus,",
        "did you mean 'context_tokens'?",
    ),
    "value outside its choices": (_enum, "config key 'likelihood.backend': Input should be", "'vllm'"),
}


@pytest.mark.parametrize("name", BAD)
def test_a_bad_config_is_one_line_naming_the_file_and_key(tmp_path, name):
    change, start, hint = BAD[name]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(change(_embedded())))
    proc = run_snakemake(tmp_path / "work", "-n", "--configfile", str(path), check=False)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if not line.startswith("Creating specified")]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1, lines[:20]
    assert lines[0].startswith(f"infbench: error: {path}: {start}"), lines[0]
    assert hint in lines[0]
    cli = subprocess.run([INFBENCH, "check-config", str(path)], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and cli.stdout == ""
    assert cli.stderr.splitlines() == [lines[0]]


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("likelihood:\n  context_tokens: [1, 2\n  seed: 0\n")
    proc = subprocess.run([INFBENCH, "check-config", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"infbench: error: {path}: not valid YAML: line 3, column "), proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_a_good_config_checks(tmp_path):
    proc = subprocess.run(
        [INFBENCH, "check-config", "config/config.yaml"], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "config/config.yaml: ok\n"
