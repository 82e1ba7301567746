"""What a sandboxed process may see: a :class:`Policy`.

Read-only, at their own paths: the system libraries (``/usr`` and the ``/bin``, ``/lib`` links), a few ``/etc``
files the dynamic loader and Python need, and the Python runtime as an allowlist (:mod:`.runtime`: the
standard library, the distributions of the requirement closure of the modules the program needs, infbench's
own code; weight-like files inside them left out). Read-only at neutral paths (``mounts``): what the caller
gives it, the package at ``/package``, a server's copy at ``/submission``, its model files at ``/model``. Writable: a
private ``/tmp`` and a private ``/dev/shm``.
Nothing else exists inside: no ``results/``, no home, no hub cache, no project tree, and no mount names the
host path of anything the caller mounts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from infbench.sandbox import cpus
from infbench.sandbox.runtime import pythonpath, runtime, runtime_of

SYSTEM_DIRS = ("/usr",)
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
)


class Policy(BaseModel):
    model_config = ConfigDict(frozen=True)
    read_only: tuple[str, ...]  # host paths bound read-only at the same path (system, runtime)
    links: tuple[tuple[str, str], ...] = ()  # (target, path): symbolic links (the interpreter's chain)
    site_dirs: tuple[str, ...] = ()  # empty read-only directories; read_only entries below bound back
    covered: tuple[str, ...] = ()  # files inside a system directory that appear empty
    mounts: dict[str, str] = {}  # inside path -> host path, read-only (package, server copy)
    neutral: bool = True  # mounts at their inside paths (False: unsandboxed, host paths)
    env: dict[str, str]  # the whole environment of the process
    cwd: str = "/tmp"
    devices: tuple[str, ...] = ()  # device nodes bound in (GPUs)
    tmp_bytes: int | None = None  # size limit of the private /tmp and /dev/shm (None: the kernel's)
    listen_fd: int | None = None  # a listening socket passed in (servers; see relay)
    distributions: tuple[str, ...] = ()  # "name==version" of the runtime's distributions
    hidden: dict[str, str] = {}  # runtime files left out or covered, and why
    seccomp: Literal["worker", "server", "engine"] = "worker"  # the system calls allowed (.seccomp: sockets differ)

    def path(self, inside: str) -> str:
        """Where the process sees mount ``inside`` (or a path below it): there, or unsandboxed its host path."""
        if self.neutral:
            return inside
        for name, host in self.mounts.items():
            if inside == name or inside.startswith(name + "/"):
                return host + inside[len(name) :]
        return inside


def base_env(threads: int, python: str = sys.executable) -> dict[str, str]:
    """The allowlisted environment every sandboxed Python process (run by ``python``) starts from."""
    env = {
        "PATH": f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(pythonpath()),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": "/tmp/hf",
        "TOKENIZERS_PARALLELISM": "false",
        **cpus.thread_env(threads),
    }
    for key in (
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "NCCL_NVLS_ENABLE",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST",
        "NVSHMEM_DISABLE_NVLS",
    ):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def job_gpus() -> list[int]:
    """The GPU indices this job was given (``CUDA_VISIBLE_DEVICES`` as the scheduler sets it, numeric entries),
    else every ``/dev/nvidia<N>`` of the machine."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
        return [int(v) for v in visible.split(",") if v.strip()]
    return sorted(int(p.name[6:]) for p in Path("/dev").glob("nvidia*") if p.name[6:].isdigit())


def gpu_devices(gpus: list[int] | None = None) -> tuple[str, ...]:
    """NVIDIA device nodes bound into sandboxes that run on CUDA: the driver's control nodes and the GPUs
    ``gpus`` (indices; None: every GPU of the machine). A GPU whose node is not bound cannot be opened inside."""
    nodes = [p for p in Path("/dev").glob("nvidia*") if not p.is_dir()]
    return tuple(sorted(str(p) for p in nodes if not p.name[6:].isdigit() or gpus is None or int(p.name[6:]) in gpus))


def python_policy(
    *,
    modules: list[str] | tuple[str, ...],
    env: dict[str, str],
    mounts: dict[str, str] | None = None,
    read_only: list[str] = (),
    cwd: str = "/tmp",
    cuda: bool = False,
    gpus: list[int] | None = None,
    tmp_bytes: int | None = None,
    listen_fd: int | None = None,
    python: str | None = None,
) -> Policy:
    """A policy for a Python program that imports ``modules`` (the runtime is their closure, :mod:`.runtime`).
    ``mounts``: inside path -> host path, read-only; ``read_only``: host paths bound at their own path;
    ``gpus``: with ``cuda``, the only GPUs whose device nodes are bound (None: all); ``python``: the program's
    interpreter where it is another environment's (its runtime is the closure in that environment)."""
    from infbench.sandbox import bwrap

    rt = runtime(tuple(modules)) if python is None else runtime_of(python, tuple(modules))
    system = [p for p in (*SYSTEM_DIRS, *ETC_FILES) if os.path.exists(p)]
    if cuda:
        system += [p for p in ("/sys",) if os.path.exists(p)]  # the driver's files are under /usr already
    mounts = {k: os.path.realpath(v) for k, v in (mounts or {}).items()}
    neutral = bwrap.unavailable_reason() is None
    bound = [*system, *rt.binds, *rt.site_dirs]
    for inside in mounts:
        clash = next(
            (p for p in bound if p == inside or p.startswith(inside + "/") or inside.startswith(p + "/")), None
        )
        if neutral and clash:
            raise ValueError(f"sandbox mount {inside} would cover or sit inside {clash} of the runtime")
    policy = Policy(
        read_only=tuple(dict.fromkeys([*system, *rt.binds, *map(os.path.realpath, read_only)])),
        links=rt.links,
        site_dirs=rt.site_dirs,
        covered=rt.covered,
        mounts=mounts,
        neutral=neutral,
        env=env,
        cwd=cwd,
        devices=gpu_devices(gpus) if cuda else (),
        tmp_bytes=tmp_bytes,
        listen_fd=listen_fd,
        distributions=rt.distributions,
        hidden=rt.hidden_reasons,
    )
    return policy.model_copy(update={"cwd": policy.path(cwd)})
