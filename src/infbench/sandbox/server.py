"""A server under test in the sandbox, reachable on the host's loopback through :mod:`.relay`.

It sees, read-only: the Python runtime (model files inside it hidden), its own directory (what the caller
hides in it empty) and the model files its command names; it has a private ``/tmp``, the allowlisted
environment plus what its spec sets, its own PID namespace (everything it started dies with it) and its own
network namespace. The caller's clients reach it at the returned base URL, a port on the host's loopback
whose listening socket was passed in; inside, the server listens on ``inner_port`` of its own loopback.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import BinaryIO

from infbench.sandbox.launch import Sandboxed, SandboxSettings
from infbench.sandbox.policy import base_env, python_policy

NETWORK = "own namespace; reached only through a listening socket on the host's loopback (relay)"


@contextlib.contextmanager
def sandboxed(command: list[str], *, inner_port: int, host: str, read_only: list[str], hidden: list[str],
              env: dict[str, str], cwd: str, cuda: bool, threads: int, settings: SandboxSettings,
              log: BinaryIO) -> Iterator[tuple[str, Sandboxed]]:
    """Start ``command`` (rendered to listen on ``127.0.0.1:inner_port``) with ``read_only`` bound and the
    ``hidden`` paths inside them empty; yield its base URL and sandbox."""
    listener = socket.socket()
    listener.bind((host, 0))
    listener.listen(1024)
    listener.set_inheritable(True)
    port = listener.getsockname()[1]
    relay = [sys.executable, "-m", "infbench.sandbox.relay", "--listen-fd", str(listener.fileno()),
             "--port", str(inner_port), "--", *command]
    policy = python_policy(read_only=read_only, hidden=hidden, env={**base_env(threads), **env}, cwd=cwd,
                           cuda=cuda, tmp_bytes=settings.tmp_mb << 20)
    try:
        with Sandboxed(policy, relay, allow_unsandboxed=settings.allow_unsandboxed, network=NETWORK,
                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                       pass_fds=(listener.fileno(),)) as box:
            listener.close()  # the sandbox holds it now
            yield f"http://{host}:{port}", box
    finally:
        listener.close()
