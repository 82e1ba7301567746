"""`make lint`, in the test suite so that CI fails on it: ruff (lint and format, pyproject.toml) on the Python
code, snakefmt on the rule files, and Snakemake's own lint of the workflow."""

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run_snakemake

BIN = Path(sys.executable).parent
PYTHON = ["src", "tests", "workflow/scripts", "scripts"]


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", *PYTHON],
        ["ruff", "format", "--check", *PYTHON],
        ["snakefmt", "--check", "Snakefile", "workflow/rules"],
    ],
    ids=["ruff-check", "ruff-format", "snakefmt"],
)
def test_the_code_is_clean(command):
    proc = subprocess.run([str(BIN / command[0]), *command[1:]], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(command)} (fix: make format)\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"


def test_the_workflow_lints_clean(workdir):
    proc = run_snakemake(workdir, "--lint")
    assert "Congratulations, your workflow is in a good condition!" in proc.stdout + proc.stderr
