"""Every CLI error a user can cause is one line naming the file or flag, exit code 2, no traceback (issue
40, item 4): each command run as a user runs it, in an empty working directory."""

import subprocess

import pytest
from conftest import INFBENCH, REPO

# name -> (arguments, the start of the one line after "infbench: error: ")
CASES = {
    "reward before the source is built": (
        ["reward", str(REPO / "examples/starter_submission"), "--task", "smollm2-135m-0.1gib"],
        "results/sources/smollm2-135m/hf: the template",
    ),
    "reward of a missing submission": (
        ["reward", "nope", "--task", "smollm2-135m-0.1gib"],
        "nope: not a submission directory (it does not exist)",
    ),
    "reward of a package directory before the search set is built": (
        ["reward", str(REPO / "examples/servers/S0"), "--task", "smollm2-135m-0.1gib"],
        "results/sources/smollm2-135m/source.json: smollm2-135m's search set is not built: run `snakemake",
    ),
    "stage-times without benchmarks/": (["stage-times"], "benchmarks: no benchmark files here"),
    "replay-log on a missing summary": (
        ["replay-log", "nope.json", "--server", ".", "--log", "log.jsonl", "--wall-s", "1"],
        "nope.json: cannot read the replay summary (No such file or directory)",
    ),
    "source --origin not JSON": (
        ["source", "x", "--origin", "notjson", "--out-dir", "o", "--record", "r.json"],
        "config key '--origin': not JSON",
    ),
    "source --origin of an unknown type": (
        ["source", "x", "--origin", '{"type": "zip"}', "--out-dir", "o", "--record", "r.json"],
        "config key '--origin type': Input should be 'hub', 'local' or 'python_package'",
    ),
    "check-run on a missing directory": (["check-run", "runs/nope"], "runs/nope: not a run directory"),
    "replay of a missing trace (read before the server)": (
        ["replay", "--trace", "nope.jsonl", "--url", "http://127.0.0.1:9", "--out", "o"],
        "nope.jsonl: no such trace file or directory (--trace)",
    ),
    "a missing --config": (["check-config", "none.yaml"], "none.yaml: not a readable file"),
    "summary without results/": (["summary"], "results: no such results directory (--results)"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_user_error_is_one_line_naming_the_file_or_flag(tmp_path, name):
    args, start = CASES[name]
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    proc = subprocess.run([INFBENCH, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.startswith(f"infbench: error: {start}"), proc.stderr[-3000:]
    assert len(proc.stderr.splitlines()) == 1, proc.stderr[-3000:]
    assert list(tmp_path.iterdir()) == [tmp_path / "config"]  # nothing written
