"""A server under test in the sandbox, reachable on the host's loopback through :mod:`.relay`.

It sees, read-only: the Python runtime of the modules its spec ``requires`` (an allowlist, :mod:`.runtime`;
infbench's own server modules bring what they import, :data:`SERVER_IMPORTS`), its own working copy at
``/submission`` and the model files its command names at ``/model`` and ``/gguf/<name>``; it has a private ``/tmp``,
the allowlisted environment plus what its spec sets, its own PID namespace (everything it started dies with
it) and its own network namespace. The caller's clients reach it at the returned base URL, a port on the host's
loopback whose listening socket was passed in; inside, the server listens on ``inner_port`` of its own loopback.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import BinaryIO

from infbench.config.model import SandboxSettings
from infbench.sandbox.launch import Sandboxed
from infbench.sandbox.policy import Policy, base_env, python_policy

NETWORK = "own namespace; reached only through a listening socket on the host's loopback (relay)"
WORK, MODEL, GGUF = "/submission", "/model", "/gguf"  # where a server sees its copy and its model files

# What infbench's server modules (the relay, infbench.serving.*) import beyond the standard library; uvicorn
# picks uvloop and httptools when they are there, as it does outside.
SERVER_IMPORTS = ("numpy", "pydantic", "starlette", "uvicorn", "uvloop", "httptools")


def server_policy(
    requires: list[str],
    *,
    mounts: dict[str, str],
    env: dict[str, str],
    cuda: bool,
    threads: int,
    settings: SandboxSettings,
    cwd: str = WORK,
    gpus: list[int] | None = None,
    python: str | None = None,
    read_only: tuple[str, ...] = (),
) -> Policy:
    """The policy of a server that imports ``requires`` (its spec's), with ``mounts`` (inside -> host); its system
    calls are the server profile's (it listens and connects on its own loopback). ``gpus``: with ``cuda``, the
    GPUs it is charged for, the only ones whose device nodes it gets (and its ``CUDA_VISIBLE_DEVICES``);
    ``python``: its interpreter where it is another environment's (vLLM's), whose closure of ``requires`` it
    sees; ``read_only``: host paths bound at their own path (vLLM's CPU topology)."""
    visible = {}
    if cuda and gpus:
        visible = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    policy = python_policy(
        modules=[*requires, *SERVER_IMPORTS],
        mounts=mounts,
        env={**base_env(threads), **env, **visible},
        cwd=cwd,
        cuda=cuda,
        gpus=gpus,
        tmp_bytes=settings.tmp_mb << 20,
        python=python,
        read_only=list(read_only),
    )
    return policy.model_copy(update={"seccomp": "server"})


@contextlib.contextmanager
def sandboxed(
    command: list[str],
    *,
    policy: Policy,
    inner_port: int,
    host: str,
    settings: SandboxSettings,
    log: BinaryIO,
    charged_cpus: int | None = None,
    python: str | None = None,
) -> Iterator[tuple[str, Sandboxed]]:
    """Start ``command`` (rendered to listen on ``127.0.0.1:inner_port``); yield its base URL and sandbox, which
    runs on ``charged_cpus`` of the job's CPUs only (:mod:`.cpus`; None: all). The relay (standard library only)
    runs under ``python``, the server's interpreter where it is another environment's (the only one bound)."""
    listener = socket.socket()
    listener.bind((host, 0))
    listener.listen(1024)
    listener.set_inheritable(True)
    port = listener.getsockname()[1]
    relay = [
        python or sys.executable,
        "-m",
        "infbench.sandbox.relay",
        "--listen-fd",
        str(listener.fileno()),
        "--port",
        str(inner_port),
        "--",
        *command,
    ]
    try:
        with Sandboxed(
            policy,
            relay,
            allow_unsandboxed=settings.allow_unsandboxed,
            network=NETWORK,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(listener.fileno(),),
            charged_cpus=charged_cpus,
        ) as box:
            listener.close()  # the sandbox holds it now
            yield f"http://{host}:{port}", box
    finally:
        listener.close()
