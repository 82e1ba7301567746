"""Server submissions (PROTOCOL B1, B5): a directory with ``submission.yaml`` and its code.

``submission.yaml``::

    name: S0                      # optional; the directory name by default, must equal it if given
    description: ...
    command: ["{python}", "-m", "infbench.serving.starter", "--model", "{model_dir}", "--port", "{port}"]
    port: null                    # null: the verifier picks a free loopback port; an int: that port
    health_path: /health
    concurrency: 1                # the session concurrency c the submission is scored at
    model: smollm2-135m           # the source it serves (a key of `sources`; must be serving.source)
    requires: [infbench, torch]   # importable modules the command needs (checked, never installed)
    startup_timeout_s: 600
    request_fields: {}            # extra JSON fields every completion request carries
    env: {}                       # extra environment variables of the server process

``command`` placeholders: {python} {host} {port} {model_dir} {gguf} {model_name} {threads}
{context_limit} {devices}. ``health_path`` is a plain absolute path (no host, query or fragment),
set as the path of the server's URL.

The pipeline never reads through a submission's links: before its spec is read, every name in the
directory must be a regular file, a directory or a symlink that stays inside it, with no hard link
to a file outside (:func:`infbench.package_files.package_entries`, the rule CompressionBench
applies to packages). The directory is then copied, links kept as links (they stay inside it) and its
``__pycache__``, ``*.pyc`` and ``.git`` left out (the server runs its sources), into a fresh working copy,
and the command runs there (cwd = the copy), so a submission's own files are found by relative path; the
verifier never talks to a process the submitter started.

The command runs in the sandbox (:mod:`infbench.sandbox.server`): it sees the runtime of its ``requires``
(an allowlist), its copy at /submission (its working directory) and the model files it names at /model
({model_dir}) and /gguf/<name> ({gguf}) read-only, a private /tmp, the allowlisted environment plus
``env``; it has its own PID and network namespaces and is reached through a relayed port on the host's
loopback ({port} is the port it listens on inside).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from infbench import vllm_env
from infbench.config.model import HealthPath, SandboxSettings
from infbench.errors import ConfigError, InfbenchError, InputFileError
from infbench.sandbox.launch import Sandboxed, SandboxRecord, SandboxUnavailable
from infbench.sandbox.policy import base_env, job_gpus, python_policy
from infbench.sandbox.server import GGUF, MODEL, SERVER_IMPORTS, WORK, server_policy
from infbench.sandbox.server import sandboxed as sandboxed_server
from infbench.serving import servers

SPEC_FILE = "submission.yaml"


class ServerSubmission(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    command: list[str] = Field(min_length=1)
    port: int | None = Field(default=None, ge=1, le=65535)
    health_path: HealthPath = "/health"
    concurrency: int = Field(ge=1)
    model: str
    requires: list[str] = Field(default_factory=list)
    startup_timeout_s: float = Field(default=600, gt=0)
    request_fields: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)


class LaunchError(InfbenchError):
    """The submission could not be started or never became healthy (``sandbox``: how it was isolated)."""

    def __init__(self, message: str, sandbox: SandboxRecord | None = None):
        self.sandbox = sandbox
        super().__init__(message)


def spec_path(directory: str | Path) -> Path:
    return Path(directory) / SPEC_FILE


def load(directory: str | Path) -> ServerSubmission:
    """The validated spec; errors name the file and the field."""
    path = spec_path(directory)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InputFileError(path, f"cannot read the submission spec: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise InputFileError(path, f"not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise InputFileError(path, "the spec must be a mapping of fields")
    raw.setdefault("name", Path(directory).name)
    try:
        sub = ServerSubmission.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(map(str, err["loc"])) or "(spec)"
        raise InputFileError(path, f"field '{field}': {err['msg']}") from None
    if sub.name != Path(directory).name:
        raise InputFileError(
            path, f"field 'name': '{sub.name}' differs from the directory name '{Path(directory).name}'"
        )
    render(sub, servers.LaunchVars(port=sub.port or 8000), path)
    return sub


def render(sub: ServerSubmission, launch: servers.LaunchVars, path: str | Path) -> list[str]:
    values = launch.model_dump()
    try:
        return [arg.format(**values) for arg in sub.command]
    except (KeyError, IndexError, ValueError) as exc:
        raise InputFileError(
            path, f"field 'command': bad placeholder {exc} (known: {', '.join(sorted(values))})"
        ) from None


# What the working copy of a submission's directory leaves out, and what is no input of its job: compiled
# bytecode (the server runs its sources) and git.
HIDDEN_DIRS = ("__pycache__", ".git")


def _walk(directory: str | Path) -> Iterator[tuple[Path, list[str], list[str], list[str]]]:
    """(directory, its :data:`HIDDEN_DIRS`, its ``*.pyc`` files, all its file names) of every directory under
    ``directory`` but the hidden ones, links never followed."""
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        hidden = [d for d in dirnames if d in HIDDEN_DIRS]
        dirnames[:] = [d for d in dirnames if d not in HIDDEN_DIRS]
        yield Path(dirpath), hidden, [f for f in filenames if f.endswith(".pyc")], filenames


def fresh_copy(directory: str | Path, parent: str | Path) -> Path:
    """A fresh working copy of the submission directory under ``parent``: links copied as links (checked to
    stay inside it first, :func:`infbench.package_files.package_entries`), never followed, and
    :data:`HIDDEN_DIRS` and ``*.pyc`` left out."""
    dest = Path(parent) / Path(directory).name
    shutil.copytree(directory, dest, symlinks=True, ignore=shutil.ignore_patterns(*HIDDEN_DIRS, "*.pyc"))
    return dest


@contextlib.contextmanager
def workspace(directory: str | Path) -> Iterator[Path]:
    """A temporary directory holding the fresh copy; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"infbench-verify-{Path(directory).name}-") as tmp:
        yield fresh_copy(directory, tmp)


def interpreter(sub: ServerSubmission) -> str | None:
    """The Python of another environment that runs ``sub``'s command: the vLLM environment's where the command
    starts with ``{vllm_python}`` (:class:`~infbench.vllm_env.VllmEnvironmentMissing` where it is not
    installed: the machine's fault, not the submission's); None: the pipeline's own."""
    if sub.command[0] == "{vllm_python}":
        return str(vllm_env.require_vllm_python())
    return None


def host_paths(python: str | None) -> tuple[str, ...]:
    """What the server's sandbox binds of the host beyond its runtime: vLLM's CPU topology under vLLM."""
    return vllm_env.host_topology() if python is not None else ()


def missing_requirements(sub: ServerSubmission, cwd: str | Path, sandbox: SandboxSettings) -> list[str]:
    """The modules of ``requires`` that the server's Python (:func:`interpreter`) cannot import from ``cwd``
    (found, not imported). Finding a submodule runs its package's ``__init__``, the submission's own code: so
    this runs in its sandbox too."""
    if not sub.requires:
        return []
    other = interpreter(sub)
    code = (
        "import importlib.util, sys\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n        ok = importlib.util.find_spec(m) is not None\n"
        "    except (ImportError, ValueError):\n        ok = False\n"
        "    print(m if not ok else '')\n"
    )
    policy = python_policy(
        modules=[*sub.requires, *SERVER_IMPORTS],
        mounts={WORK: str(cwd)},
        env=base_env(1),
        cwd=WORK,
        python=other,
        read_only=list(host_paths(other)),
    )
    try:
        with Sandboxed(
            policy,
            [other or sys.executable, "-c", code, *sub.requires],
            allow_unsandboxed=sandbox.allow_unsandboxed,
            network="none",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as box:
            out, err = box.proc.communicate(timeout=120)
    except (SandboxUnavailable, subprocess.TimeoutExpired) as exc:
        return [f"(could not check: {exc})"]
    if box.proc.returncode != 0:
        return [f"(could not check: {err.decode(errors='replace').strip()[-300:]})"]
    return [line for line in out.decode().splitlines() if line.strip()]


@dataclass
class Running:
    base_url: str
    proc: subprocess.Popen
    log_path: Path
    command: list[str]
    sandbox: SandboxRecord

    def alive(self) -> bool:
        return self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll()


INNER_PORT = 8000  # where a submission listens inside its own network namespace when it names no port


def _model_mounts(cmd_template: list[str], launch: servers.LaunchVars) -> dict[str, str]:
    """The model files the command names, by placeholder, and where its sandbox mounts them."""
    text = " ".join(cmd_template)
    found = {}
    if "{model_dir}" in text and launch.model_dir:
        found["model_dir"] = MODEL
    if "{gguf}" in text and launch.gguf:
        found["gguf"] = f"{GGUF}/{Path(launch.gguf).name}"
    return found


@contextlib.contextmanager
def running(
    sub: ServerSubmission,
    launch: servers.LaunchVars,
    workdir: str | Path,
    log_path: str | Path,
    sandbox: SandboxSettings,
    cuda: bool = False,
    charged_cpus: int | None = None,
) -> Iterator[Running]:
    """Launch the submission in its sandbox from ``workdir``, wait until healthy, yield it; always kill the
    whole sandbox afterwards. It runs on ``charged_cpus`` CPUs only and, with ``cuda``, sees ``launch.devices``
    GPUs only (the first of the job's)."""
    models = _model_mounts(sub.command, launch)
    other = interpreter(sub)
    policy = server_policy(
        sub.requires,
        mounts={WORK: str(workdir)} | {inside: getattr(launch, key) for key, inside in models.items()},
        env=sub.env,
        cuda=cuda,
        threads=launch.threads,
        settings=sandbox,
        gpus=job_gpus()[: launch.devices] if cuda else None,
        python=other,
        read_only=host_paths(other),
    )
    inner = launch.model_copy(
        update={
            "host": "127.0.0.1",
            "port": sub.port or INNER_PORT,
            **{key: policy.path(inside) for key, inside in models.items()},
        }
    )
    cmd = render(sub, inner, f"{sub.name}/{SPEC_FILE}")
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"$ (cd {workdir}) {' '.join(cmd)}\n".encode())
        log.flush()
        try:
            with sandboxed_server(
                cmd,
                policy=policy,
                inner_port=inner.port,
                host=launch.host,
                settings=sandbox,
                log=log,
                charged_cpus=charged_cpus,
                python=other,
            ) as (base_url, box):
                try:
                    servers._wait_healthy(
                        sub.name, box.proc, servers.url_at(base_url, sub.health_path), sub.startup_timeout_s, log_path
                    )
                except servers.ServerFailed as exc:
                    raise LaunchError(str(exc), box.record) from None
                yield Running(base_url, box.proc, log_path, cmd, box.record)
        except (SandboxUnavailable, OSError) as exc:
            raise LaunchError(f"launch failed: {exc}") from None


def discover(roots: list[str]) -> dict[str, str]:
    """{name: directory} of every ``<root>/<name>/submission.yaml``; missing roots are skipped."""
    found: dict[str, str] = {}
    for root in roots:
        for spec in sorted(Path(root).glob(f"*/{SPEC_FILE}")):
            name = spec.parent.name
            if name in found:
                raise ConfigError(
                    "serving.submissions", f"submission '{name}' is in both {found[name]} and {spec.parent}"
                )
            found[name] = str(spec.parent)
    return found


def files(directory: str | Path) -> list[str]:
    """Every regular file of a submission but those the sandbox hides, links never followed (its job's inputs:
    editing one reruns the job; planning reads no file a link points at)."""
    return sorted(
        str(d / f)
        for d, _, pyc, names in _walk(directory)
        for f in names
        if f not in pyc and stat.S_ISREG(os.lstat(d / f).st_mode)
    )
