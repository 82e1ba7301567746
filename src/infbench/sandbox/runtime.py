"""The Python runtime a sandbox sees: the standard library and an allowlist of distributions.

A sandboxed program names the modules it needs (a package worker: its runtime's, its manifest's ``preload``
and the worker's own; a server: its spec's ``requires`` and infbench's server modules). What is bound,
read-only and at its own path:

- the interpreter (its executable and, in a virtual environment, ``pyvenv.cfg``), its shared library, the
  standard library and the C headers (compilers such as torch's inductor read them);
- every directory where distributions are installed (``site-packages``, a ``pip --target`` directory on
  ``PYTHONPATH``, the base interpreter's own) becomes an empty read-only directory into which only the
  distributions of the *requirement closure* of those modules are bound back: the distributions that own
  the modules (``importlib.metadata.packages_distributions``), what they require (``Requires-Dist``, markers
  evaluated for this interpreter, extras followed where a requirement asks for them), and so on. A
  distribution outside the closure, a model shipped as a wheel included, does not exist inside. A directory
  shared with a distribution outside the closure (a namespace package) is bound entry by entry;
- infbench's own code (the directory ``infbench`` is imported from), but its question data (the accuracy
  gate's items, templates and golds: a package sees token ids, never the questions or their answers).

Inside what is bound, every file that looks like model weights is hidden (:mod:`.weightlike`, by name and
by content), and so is every file a distribution outside the closure installed there (a wheel may put data
files anywhere under its prefix).

The walk behind this takes about a second in an environment with torch; it is done once per process (a
pipeline job) for each set of modules. A program run by another environment's interpreter (the vLLM
environment's, :mod:`infbench.vllm_env`) gets the runtime that interpreter computes for itself
(:func:`runtime_of`: ``python -m infbench.sandbox.runtime MODULE...`` prints it).
"""

from __future__ import annotations

import csv
import functools
import glob
import importlib.machinery
import importlib.metadata as md
import os
import site
import subprocess
import sys
import sysconfig
from collections import deque
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict

from infbench.sandbox import weightlike

# Distribution directories of system Pythons, masked even when this interpreter does not use them.
SYSTEM_SITE_GLOBS = (
    "/usr/lib/python3*/dist-packages",
    "/usr/lib/python3*/site-packages",
    "/usr/local/lib/python3*/dist-packages",
    "/usr/local/lib/python3*/site-packages",
)


class Runtime(BaseModel):
    """What :func:`runtime` binds; paths are host paths, bound at the same path."""

    model_config = ConfigDict(frozen=True)
    binds: tuple[str, ...]  # read-only, inside ``site_dirs`` or beside them
    links: tuple[tuple[str, str], ...]  # (target, path) symbolic links: the interpreter's chain
    site_dirs: tuple[str, ...]  # each an empty read-only directory, ``binds`` below it bound back
    covered: tuple[str, ...]  # hidden files inside a system directory: covered by an empty file
    hidden_reasons: dict[str, str]  # every file left out or covered, and why
    distributions: tuple[str, ...]  # "name==version" of the closure, sorted


def _real(path: str | Path) -> str:
    return os.path.realpath(path)


def infbench_dir() -> str:
    import infbench

    return str(Path(infbench.__file__).resolve().parent)


def pythonpath() -> list[str]:
    """The sandbox's ``PYTHONPATH``: where ``infbench`` is imported from and this process's ``PYTHONPATH``
    entries (``pip --target`` directories), never the working directory or a directory holding it."""
    cwd = _real(os.getcwd())
    dirs = [str(Path(infbench_dir()).parent)]
    dirs += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p)]
    real = [_real(d) for d in dirs]
    return list(dict.fromkeys(d for d in real if not (cwd == d or cwd.startswith(d + os.sep))))


def site_dirs() -> list[str]:
    """Every directory distributions may be installed in that a sandbox could see."""
    dirs = [*site.getsitepackages(), *site.getsitepackages([sys.base_prefix]), *pythonpath()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    for pattern in SYSTEM_SITE_GLOBS:
        dirs += glob.glob(pattern)
    return list(dict.fromkeys(_real(d) for d in dirs if os.path.isdir(d)))


def interpreter() -> tuple[list[tuple[str, str]], list[str]]:
    """The symbolic links from ``sys.executable`` to the interpreter binary, and the files to bind for it."""
    links, files = [], []
    path = os.path.abspath(sys.executable)
    for _ in range(40):
        if not os.path.islink(path):
            break
        target = os.readlink(path)
        links.append((target, path))
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
    files.append(path)
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    if cfg.is_file():
        files.append(str(cfg))
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and soname:
        files += [p for p in glob.glob(os.path.join(libdir, "libpython*.so*"))]
    for key in ("stdlib", "platstdlib", "include", "platinclude"):
        p = sysconfig.get_paths().get(key)
        if p and os.path.isdir(p):
            files.append(p)
    return links, list(dict.fromkeys(files))


class _Installed:
    """The distributions installed in the site directories: by canonical name, and who owns which file."""

    def __init__(self, dirs: list[str]):
        self.by_name: dict[str, md.Distribution] = {}
        for dist in md.distributions(path=dirs):
            name = dist.metadata["Name"]
            if name:
                self.by_name.setdefault(canonicalize_name(name), dist)  # the first on the path wins, as import
        self.top_level: dict[str, list[str]] = {}
        for name in self.by_name:
            for top in self._top_names(name):
                self.top_level.setdefault(top, []).append(name)

    def _top_names(self, name: str) -> set[str]:
        """The top-level modules distribution ``name`` provides (``top_level.txt``, else its RECORD)."""
        text = self.by_name[name].read_text("top_level.txt")
        if text:
            return {line.strip() for line in text.splitlines() if line.strip()}
        base = _real(self.by_name[name].locate_file(""))
        tops = set()
        for f in self.files(name):
            if f.startswith(base + os.sep):
                first = f[len(base) + 1 :].split(os.sep)[0]
                if not first.endswith((".dist-info", ".egg-info", ".pth")) and first != "__pycache__":
                    tops.add(first.split(".")[0])
        return tops

    @functools.cache  # noqa: B019  (one runtime per process, kept for its life)
    def files(self, name: str) -> tuple[str, ...]:
        """Absolute paths of the files distribution ``name`` installed (its RECORD), or its metadata directory."""
        dist = self.by_name[name]
        base = _real(dist.locate_file(""))
        record = dist.read_text("RECORD")
        if record is None:
            meta = getattr(dist, "_path", None)
            return (str(meta),) if meta else ()
        rows = csv.reader(record.splitlines())
        return tuple(os.path.normpath(os.path.join(base, row[0])) for row in rows if row and row[0])


def _requirements(dist: md.Distribution, extras: frozenset[str]) -> list[Requirement]:
    env = default_environment()
    found = []
    for text in dist.requires or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in {"", *extras}):
            found.append(req)
    return found


def _owners(module: str, installed: _Installed, dirs: list[str]) -> list[str]:
    """Canonical names of the distributions that provide top-level ``module``; a module of no distribution
    found in a site directory is returned as its path (bound as it is)."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "infbench":
        return []
    names = installed.top_level.get(top, [])
    if names:
        return names
    spec = importlib.machinery.PathFinder.find_spec(top, dirs)
    if spec is None:
        return []
    origin = spec.submodule_search_locations[0] if spec.submodule_search_locations else spec.origin
    return [f"path:{_real(origin)}"] if origin else []


def closure(
    modules: tuple[str, ...], installed: _Installed, dirs: list[str]
) -> tuple[list[md.Distribution], list[str]]:
    """The distributions ``modules`` need, transitively; and modules found outside any distribution."""
    queue: deque[tuple[str, frozenset[str]]] = deque()
    loose: list[str] = []
    for module in modules:
        for owner in _owners(module, installed, dirs):
            if owner.startswith("path:"):
                loose.append(owner[5:])
            else:
                queue.append((owner, frozenset()))
    seen: dict[str, frozenset[str]] = {}
    while queue:
        name, extras = queue.popleft()
        if name not in installed.by_name or (name in seen and extras <= seen[name]):
            continue
        seen[name] = seen.get(name, frozenset()) | extras
        for req in _requirements(installed.by_name[name], seen[name]):
            queue.append((canonicalize_name(req.name), frozenset(req.extras)))
    return [installed.by_name[n] for n in sorted(seen)], loose


def _entries(closure_files: list[str], other_files: list[str], dirs: list[str]) -> list[str]:
    """For each closure file inside a site directory, the outermost path below that directory holding no
    file of another distribution: bind these."""

    def inside(path: str) -> tuple[str, list[str]] | None:
        base = next((d for d in dirs if path.startswith(d + os.sep)), None)
        return (base, path[len(base) + 1 :].split(os.sep)) if base else None

    shared: set[str] = set()
    for f in other_files:
        if (found := inside(f)) is not None:
            path = found[0]
            for part in found[1]:
                path = path + os.sep + part
                shared.add(path)
    chosen: set[str] = set()
    for f in closure_files:
        if (found := inside(f)) is not None:
            path = found[0]
            for part in found[1]:
                path = path + os.sep + part
                if path not in shared:
                    break
            chosen.add(path)
    ordered = sorted(chosen)  # an entry inside another entry is bound with it
    return [p for i, p in enumerate(ordered) if not (i and any(p.startswith(q + os.sep) for q in ordered[:i]))]


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _files_below(root: str, skip: list[str]) -> list[str]:
    if os.path.isfile(root):
        return [root]
    found = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if not _under(os.path.join(directory, d), skip)]
        found += [os.path.join(directory, n) for n in names]
    return found


@functools.cache
def _weightlike(path: str) -> str | None:
    return weightlike.reason(path, os.path.getsize(path))


def question_data() -> str:
    """infbench's own question data (the accuracy gate's items, templates and golds): never inside a sandbox."""
    return os.path.join(infbench_dir(), "evaluation", "data")


def _hidden(roots: list[str], site: list[str], other_files: set[str]) -> dict[str, str]:
    """Files below ``roots`` (site directories excepted: they are bound entry by entry) not to be seen."""
    hidden: dict[str, str] = {}
    questions = question_data() + os.sep
    for root in roots:
        for path in _files_below(root, [d for d in site if d != root and not root.startswith(d + os.sep)]):
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if path.startswith(questions):
                hidden[path] = "the accuracy gate's questions and answers"
            elif path in other_files:
                hidden[path] = "installed by a distribution outside the closure"
            elif (why := _weightlike(path)) is not None:
                hidden[path] = why
    return hidden


def _split(path: str, hidden: set[str], site: list[str], binds: list[str], links: list[tuple[str, str]]) -> None:
    """Bind ``path``, or, if something below it is hidden, what beside the hidden files is below it: the
    sandbox sees the allowed files only, and no mount of it names a hidden one."""
    if os.path.islink(path):
        links.append((os.readlink(path), path))
    elif path in hidden:
        return
    elif os.path.isdir(path) and any(h.startswith(path + os.sep) for h in hidden):
        for name in sorted(os.listdir(path)):
            child = os.path.join(path, name)
            if child not in site:  # a site directory inside (the base interpreter's) is bound entry by entry
                _split(child, hidden, site, binds, links)
    else:
        binds.append(path)


@functools.lru_cache(maxsize=4)
def _installed(dirs: tuple[str, ...]) -> _Installed:
    return _Installed(list(dirs))


def runtime(modules: tuple[str, ...], system: tuple[str, ...] = ("/usr",)) -> Runtime:
    """The runtime a sandbox that imports ``modules`` sees (cached per process and site directories).
    ``system``: directories bound whole by the caller; a hidden file under one of them is covered instead."""
    return _runtime(tuple(modules), system, tuple(site_dirs()))


@functools.lru_cache(maxsize=4)
def runtime_of(python: str, modules: tuple[str, ...], system: tuple[str, ...] = ("/usr",)) -> Runtime:
    """The runtime of a sandbox whose program ``python`` runs (another environment's interpreter): computed by
    that interpreter, from its own site directories and distributions (cached per process)."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # a venv's python links to its base
        return runtime(modules, system)
    done = subprocess.run(
        [python, "-m", "infbench.sandbox.runtime", "--system", ",".join(system), *modules],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath())},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{python} could not list its sandbox runtime: {done.stderr.strip()[-2000:]}")
    return Runtime.model_validate_json(done.stdout)


@functools.lru_cache(maxsize=16)
def _runtime(modules: tuple[str, ...], system: tuple[str, ...], site: tuple[str, ...]) -> Runtime:
    dirs = list(site)
    installed = _installed(tuple(dirs))
    dists, loose = closure(tuple(modules), installed, dirs)
    chosen = {canonicalize_name(d.metadata["Name"]) for d in dists}
    closure_files = [f for n in chosen for f in installed.files(n)]
    other_files = [f for n in installed.by_name if n not in chosen for f in installed.files(n)]
    links, interp = interpreter()
    roots = [*interp, infbench_dir(), *_entries(closure_files, other_files, dirs), *loose]
    roots = [r for r in dict.fromkeys(roots) if os.path.exists(r)]
    reasons = _hidden(roots, dirs, set(other_files))
    binds: list[str] = []
    for root in roots:
        if _under(root, system):
            binds.append(root)
        else:
            _split(root, set(reasons), dirs, binds, links)
    return Runtime(
        binds=tuple(binds),
        links=tuple(links),
        site_dirs=tuple(dirs),
        covered=tuple(sorted(h for h in reasons if _under(h, system))),
        hidden_reasons=reasons,
        distributions=tuple(sorted(f"{d.metadata['Name']}=={d.version}" for d in dists)),
    )


def main(argv: list[str] | None = None) -> None:
    """Print, as JSON, the runtime this interpreter's sandbox needs for the modules named (:func:`runtime_of`)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m infbench.sandbox.runtime")
    p.add_argument("--system", default="/usr", help="comma-separated directories the caller binds whole")
    p.add_argument("modules", nargs="+")
    args = p.parse_args(argv)
    print(runtime(tuple(args.modules), tuple(filter(None, args.system.split(",")))).model_dump_json())


if __name__ == "__main__":
    main()
