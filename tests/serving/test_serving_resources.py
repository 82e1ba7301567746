"""Resources as charged (PROTOCOL B5; not in the paper): a verified server's sandbox runs on exactly the CPUs its
deployment is charged for (a cpuset the server cannot widen), its CPU time is recorded, and D divides by what the
sandbox allowed. Real sandboxes (bubblewrap) and real cgroups; a server that starts a busy process on every CPU
it sees."""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
import verify_helpers as vh
from conftest import needs_sandbox

SANDBOX = {"allow_unsandboxed": False, "tmp_mb": 64}

# A pool on "every CPU": os.cpu_count() reports the host's CPUs whatever the cpuset; each worker widens its own
# affinity to all of them first (sched_setaffinity is bounded by the cpuset).
POOL = """
import http.server, json, multiprocessing, os, sys

def spin():
    try:
        os.sched_setaffinity(0, range(os.cpu_count()))
    except OSError:
        pass
    while True:
        pass

if __name__ == "__main__":
    pool = [multiprocessing.Process(target=spin, daemon=True) for _ in range(os.cpu_count())]
    for p in pool:
        p.start()

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            pools = [sorted(os.sched_getaffinity(p.pid)) for p in pool]
            body = json.dumps({"cpu_count": os.cpu_count(), "pool": pools})
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body.encode())

    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

# A server that says which CPUs it and a child it started may run on, and the sizes of its thread pools.
AFFINITY = """
import http.server, json, os, subprocess, sys

child = subprocess.run(
    [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"], capture_output=True, text=True
).stdout


class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        threads = {k: v for k, v in os.environ.items() if k.endswith(("_NUM_THREADS", "_MAXIMUM_THREADS"))}
        body = json.dumps({"server": sorted(os.sched_getaffinity(0)), "child": json.loads(child), "threads": threads})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())


http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _cpuset_possible() -> str | None:
    from infbench.sandbox import cgroup, cpus

    try:
        c = cpus.create(cpus.allot(1), None)
    except (cgroup.CgroupUnavailable, OSError) as exc:
        return str(exc)
    c.remove()
    return None


@needs_sandbox()
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to hold a server to 1")
@pytest.mark.skipif(_cpuset_possible() is not None, reason=f"no cpuset cgroup here: {_cpuset_possible()}")
def test_a_pool_on_every_cpu_is_held_to_the_charged_cpus(tmp_path):
    """Charged for 1 CPU, a server spinning one process per CPU it sees (os.cpu_count()) runs on that one CPU
    only: every worker's affinity is it (their own sched_setaffinity cannot widen it), the sandbox's CPU time
    grows at most one CPU-second per second, and the record and the table's column say so (d = 1)."""
    from infbench.config.model import Deployment, SandboxSettings
    from infbench.sandbox import cpus
    from infbench.serving import servers
    from infbench.serving.verify import resources, submission

    spec = {"command": ["{python}", "pool.py", "{port}"], "model": "smollm2-135m", "concurrency": 1}
    sub = vh.submission_dir(tmp_path / "subs", "pool", spec)
    (sub / "pool.py").write_text(POOL)
    first = cpus.job_cpus()[0]
    t0 = time.monotonic()
    with (
        submission.workspace(sub) as copy,
        submission.running(
            submission.load(sub),
            servers.LaunchVars(),
            str(copy),
            tmp_path / "server.log",
            SandboxSettings.model_validate(SANDBOX),
            charged_cpus=1,
        ) as server,
    ):
        shown = json.loads(httpx.get(f"{server.base_url}/", timeout=10).text)
        assert shown["cpu_count"] >= 2 and len(shown["pool"]) == shown["cpu_count"]
        assert all(a == [first] for a in shown["pool"]), shown
        record = server.sandbox
        assert record.cpus.kind.startswith("cpuset") and record.cpus.allowed == [first] and record.cpus.reachable == 1
        time.sleep(3.0)
    wall = time.monotonic() - t0
    used = record.cpus.cpu_time_s  # read as the sandbox was torn down: everything it ran, startup included
    # at most one CPU-second per second of its life (the pool would take every CPU otherwise), and it did spin
    assert used is not None and 0.3 < used <= 1.05 * wall + 0.5, (used, wall)
    dep = Deployment(devices=1, accelerator="cpu", cpus_per_device=1)
    assert resources.devices_scored(dep, record) == 1
    assert resources.describe(dep, record).startswith(f"1 of {len(cpus.job_cpus())} CPUs (cpuset), ")
    assert resources.describe(dep, record).endswith("d = 1")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to hold an engine to 1")
def test_a_trusted_engine_runs_on_the_charged_cpus(tmp_path, monkeypatch):
    """The calibration reference and a development replay's server are launched on the CPUs a verified server is
    charged for (devices x cpus_per_device, the first of the job's), from their first instruction: a server and
    the child it starts run on that CPU only. (Their affinity, not a cpuset: a trusted engine does not widen it.)
    Their thread pools are sized to that CPU, not to the job's `threads` that Snakemake exports (with the job's
    MKL_NUM_THREADS=2 on one CPU, vLLM decoded 2.8 times slower than verified in its sandbox)."""
    from infbench.config.model import Deployment, ServerSpec
    from infbench.sandbox import cpus
    from infbench.serving import servers

    (tmp_path / "affinity.py").write_text(AFFINITY)
    for name in cpus.THREAD_COUNT_VARIABLES:  # as in a Snakemake job of 2 threads
        monkeypatch.setenv(name, "2")
    charged = servers.charged_cpus(Deployment(devices=1, accelerator="cpu", cpus_per_device=1))
    assert charged == cpus.job_cpus()[:1]
    spec = ServerSpec(command=["{python}", str(tmp_path / "affinity.py"), "{port}"], startup_timeout_s=30)
    with servers.launched("affinity", spec, servers.LaunchVars(), tmp_path / "affinity.log", charged) as base:
        shown = json.loads(httpx.get(f"{base}/", timeout=10).text)
    assert shown == {"server": charged, "child": charged, "threads": cpus.thread_env(1)}, shown
    assert servers.describe_cpus(charged) == f"1 of {len(cpus.job_cpus())} CPUs (affinity)"


def test_d_divides_by_the_devices_the_sandbox_allowed():
    """Where the sandbox could reach more than charged (no cpuset: affinity only, which a process may undo; GPUs
    whose nodes were bound), D's cost counts the devices' worth of what it could reach, never fewer than charged."""
    from infbench.config.model import Deployment
    from infbench.sandbox.cpus import CpuAccounting
    from infbench.sandbox.launch import SandboxRecord
    from infbench.serving.verify import resources

    held = CpuAccounting(kind="cpuset v1", charged=2, allowed=[0, 1], reachable=2, available=16, cpu_time_s=5.0)
    loose = CpuAccounting(
        kind="affinity", reason="no cgroup", charged=2, allowed=[0, 1], reachable=16, available=16, cpu_time_s=None
    )
    cpu = Deployment(devices=1, accelerator="cpu", cpus_per_device=2)
    assert resources.devices_scored(cpu, SandboxRecord(kind="bwrap", cpus=held)) == 1
    assert resources.devices_scored(cpu, SandboxRecord(kind="bwrap", cpus=loose)) == 8
    shown = resources.describe(cpu, SandboxRecord(kind="bwrap", cpus=loose))
    assert "16 of 16 CPUs (affinity only: no cgroup)" in shown and shown.endswith("d = 8")
    gpu = Deployment(devices=2, accelerator="gpu", cpus_per_device=1)
    bound = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]
    assert resources.devices_scored(gpu, SandboxRecord(kind="bwrap", cpus=held, devices=bound[:4])) == 2
    assert resources.devices_scored(gpu, SandboxRecord(kind="bwrap", cpus=held, devices=bound)) == 3


def test_only_the_allotted_gpus_device_nodes_are_bound(monkeypatch):
    """The GPUs of a server's sandbox are its deployment's: the job's first ``devices`` GPUs (the scheduler's
    CUDA_VISIBLE_DEVICES) and the driver's control nodes; no other GPU's node is there to open."""
    from infbench.sandbox import policy

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert policy.job_gpus() == [3, 5]
    nodes = [_Node(n) for n in ("nvidiactl", "nvidia-uvm", "nvidia3", "nvidia5", "nvidia7")]
    monkeypatch.setattr(policy, "Path", lambda _: _Dev(nodes))
    assert policy.gpu_devices([3]) == ("/dev/nvidia-uvm", "/dev/nvidia3", "/dev/nvidiactl")
    assert len(policy.gpu_devices(None)) == 5


class _Node:
    """A device node of a fake ``/dev`` (no GPU on the test machine)."""

    def __init__(self, name: str):
        self.name = name

    def is_dir(self) -> bool:
        return False

    def __str__(self) -> str:
        return f"/dev/{self.name}"


class _Dev:
    def __init__(self, nodes):
        self.nodes = nodes

    def glob(self, pattern):
        return list(self.nodes)
