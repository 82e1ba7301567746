"""Servers under test: launched from a spec, health-checked, always torn down, logs kept.

A :class:`ServerSpec` is a command template whose ``{placeholders}`` are filled
from :class:`LaunchVars` (``python``, ``vllm_python``, ``host``, ``port``, ``model_dir``,
``gguf``, ``model_name``, ``threads``, ``context_limit``, ``devices``, ``accelerator``), followed on a CPU
deployment by the spec's ``cpu_args``.
``runnable: false`` marks specs (SGLang) that are only rendered
and validated here (:func:`dry_run`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from infbench import vllm_env
from infbench.config.model import Deployment, ServerSpec, ServingCore
from infbench.errors import ConfigError, InfbenchError
from infbench.sandbox import cpus as sandbox_cpus


def url_at(base_url: str, path: str) -> str:
    """``base_url`` with its path set to ``path`` (a plain absolute path, :data:`infbench.config.model.HealthPath`):
    same scheme, host and port."""
    return str(httpx.URL(base_url).copy_with(path=path))


class LaunchVars(BaseModel):
    model_config = ConfigDict(extra="forbid")
    python: str = sys.executable
    vllm_python: str = str(vllm_env.vllm_python())
    host: str = "127.0.0.1"
    port: int = 0
    model_dir: str = ""
    gguf: str = ""
    model_name: str = "model"
    threads: int = 1
    context_limit: int = 8192
    devices: int = 1
    accelerator: str = "cpu"  # the deployment's: "cpu" appends a spec's cpu_args

    @classmethod
    def for_serving(cls, serving: ServingCore, model_dir: str, gguf: str) -> LaunchVars:
        """The placeholders of ``serving``'s deployment and replay (port and host left to the launch)."""
        return cls(
            model_dir=model_dir,
            gguf=gguf,
            model_name=serving.deployment.name,
            threads=serving.replay.threads,
            context_limit=serving.deployment.context_limit,
            devices=serving.deployment.devices,
            accelerator=serving.deployment.accelerator,
        )


def charged_cpus(deployment: Deployment) -> list[int]:
    """The CPUs a trusted engine (the calibration reference, a development replay's server) runs on: as many as
    a verified server is charged for (``devices x cpus_per_device``), the first of the job's, as the verified
    server's cpuset takes them."""
    return sandbox_cpus.allot(deployment.devices * deployment.cpus_per_device)


def describe_cpus(allowed: list[int]) -> str:
    """e.g. ``1 of 2 CPUs (affinity)``."""
    return f"{len(allowed)} of {len(sandbox_cpus.job_cpus())} CPUs (affinity)"


class ServerFailed(InfbenchError):
    pass


def render(name: str, spec: ServerSpec, launch: LaunchVars) -> list[str]:
    """The spec's argv with its placeholders filled, and its ``cpu_args`` on a CPU deployment."""
    values = launch.model_dump()
    args = spec.command + (spec.cpu_args if launch.accelerator == "cpu" else [])
    try:
        return [arg.format(**values) for arg in args]
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"serving.servers.{name}.command", f"bad placeholder {exc} (known: {', '.join(sorted(values))})"
        ) from None


def dry_run(name: str, spec: ServerSpec, launch: LaunchVars) -> str:
    """The command line a spec would run, validated but not started."""
    return " ".join(render(name, spec, launch.model_copy(update={"port": launch.port or 8000})))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``grace_s``."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def launched(
    name: str, spec: ServerSpec, launch: LaunchVars, log_path: str | Path, cpus: list[int] | None = None
) -> Iterator[str]:
    """Start the server, wait until healthy, yield its base URL; always tear it down. ``cpus``: the CPUs it runs
    on (its affinity, set before it starts, and thread pools of that size, as a sandboxed server's: a trusted
    engine is held to what a verified server is charged for; None: all of the job's, in the job's environment)."""
    if not spec.runnable:
        raise ConfigError(f"serving.servers.{name}.runnable", "this spec is validated only (dry run)")
    launch = launch.model_copy(update={"port": launch.port or free_port(launch.host)})
    cmd = render(name, spec, launch)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    base = f"http://{launch.host}:{launch.port}"
    with open(log_path, "ab") as log:
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **({} if cpus is None else sandbox_cpus.thread_env(len(cpus))), **spec.env},
            start_new_session=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        try:
            _wait_healthy(name, proc, url_at(base, spec.health_path), spec.startup_timeout_s, log_path)
            yield base
        finally:
            stop(proc)


def _wait_healthy(name: str, proc: subprocess.Popen, url: str, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerFailed(
                f"server {name} exited with {proc.returncode} before it was healthy; log {log_path}:\n{_tail(log_path)}"
            )
        with contextlib.suppress(httpx.HTTPError):
            # the status is all that counts: the body is never read (an endless one cannot stall this)
            with httpx.stream("GET", url, timeout=2.0, trust_env=False) as resp:
                if resp.status_code == 200:
                    return
        time.sleep(0.25)
    raise ServerFailed(f"server {name} not healthy at {url} after {timeout_s} s; log {log_path}:\n{_tail(log_path)}")
