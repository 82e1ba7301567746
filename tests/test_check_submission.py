"""`infbench check-submission` and `infbench check-server` (issue 40, item 3): a broken submission, copied from
examples/ with one field broken, is one line naming the file and the field, exit 2; the same checks run when
the workflow starts (src/infbench/preflight.py), so a dry run stops on it in seconds."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import INFBENCH, REPO, run_snakemake


def _infbench(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([INFBENCH, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _package(root: Path, **fields) -> Path:
    """The starter example with its model directory (no weights needed to check) and ``fields`` changed."""
    package = root / "pkg"
    shutil.copytree(REPO / "examples/starter_submission", package)
    (package / "model").mkdir()
    manifest = yaml.safe_load((package / "manifest.yaml").read_text())
    manifest["source"] = "smollm2-135m"
    manifest.update(fields)
    (package / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    return package


# name -> (manifest fields changed, the message after "<package>/manifest.yaml: ")
BROKEN_PACKAGES = {
    "unknown runtime": ({"runtime": "onnx"}, "field 'runtime': Input should be"),
    "weights missing": ({"weights": "nowhere"}, "field 'weights': nowhere does not exist in the package"),
    "weights outside": ({"weights": "../.."}, "field 'weights' points outside the package"),
    "unknown source": ({"source": "qwen"}, "field 'source': unknown source 'qwen' (sources: smollm2-135m)"),
    "entrypoint without factory": ({"entrypoint": "inference.py"}, "field 'entrypoint': runtime python needs"),
    "tokenizer does not load": ({}, "field 'tokenizer': model does not load"),
}


@pytest.mark.parametrize("name", BROKEN_PACKAGES)
def test_a_broken_package_is_one_line_naming_file_and_field(tmp_path, name):
    fields, message = BROKEN_PACKAGES[name]
    package = _package(tmp_path, **fields)
    proc = _infbench("check-submission", str(package))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"infbench: error: {package}/manifest.yaml: {message}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr


def test_a_package_without_manifest(tmp_path):
    proc = _infbench("check-submission", str(tmp_path))
    assert proc.returncode == 2
    assert (
        proc.stderr
        == f"infbench: error: {tmp_path}/manifest.yaml: manifest missing (every submission needs manifest.yaml)\n"
    )


def _server(root: Path, **fields) -> Path:
    server = root / "S0"
    shutil.copytree(REPO / "examples/servers/S0", server)
    spec = yaml.safe_load((server / "submission.yaml").read_text())
    spec.update(fields)
    (server / "submission.yaml").write_text(yaml.safe_dump(spec))
    return server


BROKEN_SERVERS = {
    "no concurrency": ({"concurrency": 0}, "field 'concurrency': Input should be greater than or equal to 1"),
    "unknown placeholder": (
        {"command": ["{python}", "server.py", "--gpu", "{gpu}"]},
        "field 'command': bad placeholder",
    ),
    "name not the directory's": ({"name": "S1"}, "field 'name': 'S1' differs from the directory name 'S0'"),
    "requirement missing": (
        {"requires": ["torch", "no_such_module_for_infbench"]},
        "field 'requires': not importable: no_such_module_for_infbench",
    ),
}


@pytest.mark.parametrize("name", BROKEN_SERVERS)
def test_a_broken_server_is_one_line_naming_file_and_field(tmp_path, name):
    fields, message = BROKEN_SERVERS[name]
    server = _server(tmp_path, **fields)
    proc = _infbench("check-server", str(server))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"infbench: error: {server}/submission.yaml: {message}"), proc.stderr
    assert len(proc.stderr.splitlines()) == 1


def test_the_example_server_checks():
    proc = _infbench("check-server", "examples/servers/S0")
    assert proc.returncode == 0 and proc.stdout == "examples/servers/S0: ok\n", proc.stderr


def test_the_workflow_stops_on_a_broken_submission_before_any_job(workdir):
    server = _server(workdir / "submissions/servers", concurrency=0)
    proc = run_snakemake(workdir, "-n", check=False)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith(f"infbench: error: {server.relative_to(workdir)}/submission.yaml: field 'concurrency'")
    ), proc.stderr[-2000:]
    shutil.rmtree(server)
    _package(workdir / "submissions", runtime="onnx")
    proc = run_snakemake(workdir, "-n", check=False)
    assert proc.returncode == 2
    assert "manifest.yaml: field 'runtime'" in proc.stderr.strip().splitlines()[-1], proc.stderr[-2000:]
