"""What package code a workflow job runs, and a digest of it (the rules' ``code`` parameter).

The workflow's scripts are thin; the logic lives in this package. Each rule passes
``params: code=`` the digest of the code its script reaches, so Snakemake's own
``params`` rerun trigger plans exactly the jobs an edit under ``src/infbench/``
affects, and their downstream.

What a script reaches, found statically from the source (nothing is imported):

- the script's own code, and every top-level function or class of this package it
  names (``likelihood.sample_set``, ``from infbench.x import f``), then every one
  those name in turn;
- the module-level code of every module touched (imports, constants, functions
  decorated by the module's own names, ``if __name__ == "__main__"``) and of the
  packages above it (their ``__init__.py`` runs on import);
- a whole module where it is used as a value (``getattr(module, name)``), imported
  with ``*``, or run by name (``[python, "-m", "infbench.compression.worker"]``;
  in config values and non-Python files, any ``infbench.x`` module name);
- the data files next to a touched module (``evaluation/data/*.jsonl``, ``evaluation/specs/*.yaml``).

The digest is over each reached part's syntax tree without docstrings, so an edit
of code reruns what reaches it, while comments, docstrings and formatting rerun
nothing. Third-party top-level imports of the reached parts are collected too: the
test that every rule's conda environment provides what its jobs import uses them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from infbench import atomic

PACKAGE = "infbench"
ROOT = Path(__file__).resolve().parent  # src/infbench
BASE = "<module>"  # a module's module-level code
WHOLE = "<whole>"  # every part of a module
_MODULE_NAME = re.compile(rf"{PACKAGE}(?:\.[A-Za-z_]\w*)+")  # in config values and non-Python files


@functools.cache
def module_file(name: str) -> Path | None:
    """The source file of package module ``name`` (``infbench.a.b``), or None if there is none."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    path = ROOT.joinpath(*parts[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def _is_module(name: str) -> bool:
    return module_file(name) is not None


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


@dataclass
class _Refs:
    """What one part of a module names: dotted chains of names, imports, modules run by name."""

    chains: set[tuple[str, ...]] = field(default_factory=set)
    bindings: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # name -> (module, attr or None)
    imported: set[str] = field(default_factory=set)  # package modules whose module-level code the imports run
    modules: set[str] = field(default_factory=set)  # package modules reached whole
    third_party: set[str] = field(default_factory=set)  # top-level names of non-stdlib imports


class _Collector(ast.NodeVisitor):
    def __init__(self, package: str):
        self.package, self.refs = package, _Refs()
        self.optional = 0  # inside `try: import x / except ImportError`: the job runs without x

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(h.type) for h in node.handlers)
        self.optional += guarded
        for child in node.body:
            self.visit(child)
        self.optional -= guarded
        for child in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(child)

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.package.split(".")
        base = parts[: len(parts) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def _third_party(self, name: str) -> None:
        top = name.split(".")[0]
        if top and top not in sys.stdlib_module_names and not self.optional:
            self.refs.third_party.add(top)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] != PACKAGE:
                self._third_party(alias.name)
                continue
            self.refs.imported.add(alias.name)
            # `import infbench.a.b` binds `infbench`, `import infbench.a.b as m` binds `m`
            self.refs.bindings[alias.asname] = (alias.name, None) if alias.asname else (PACKAGE, None)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = self._absolute(node)
        if module.split(".")[0] != PACKAGE:
            self._third_party(module)
            return
        self.refs.imported.add(module)
        for alias in node.names:
            if alias.name == "*":
                self.refs.modules.add(module)
            elif _is_module(f"{module}.{alias.name}"):
                self.refs.imported.add(f"{module}.{alias.name}")
                self.refs.bindings[alias.asname or alias.name] = (f"{module}.{alias.name}", None)
            else:
                self.refs.bindings[alias.asname or alias.name] = (module, alias.name)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name):
            self.refs.chains.add((value.id, *reversed(chain)))
        else:
            self.visit(value)

    def visit_Name(self, node: ast.Name) -> None:
        self.refs.chains.add((node.id,))

    def _run_by_name(self, node: ast.List | ast.Tuple) -> None:
        """``[python, "-m", "infbench.x", ...]``: a process that runs module ``infbench.x``."""
        for flag, name in zip(node.elts, node.elts[1:]):
            if (
                isinstance(flag, ast.Constant)
                and flag.value == "-m"
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and _is_module(name.value)
            ):
                self.refs.modules.add(name.value)
        self.generic_visit(node)

    visit_List = visit_Tuple = _run_by_name


@dataclass
class _Part:
    nodes: list[ast.AST]
    refs: _Refs

    @functools.cached_property
    def dump(self) -> str:
        """The part's syntax tree (no docstrings, no positions), as text."""
        return "\n".join(ast.dump(n) for n in self.nodes)


@dataclass
class _Module:
    name: str
    path: Path
    parts: dict[str, _Part]  # top-level function and class names, and BASE

    @property
    def bindings(self) -> dict[str, tuple[str, str | None]]:
        return self.parts[BASE].refs.bindings


def _collect(nodes: Iterable[ast.AST], package: str) -> _Refs:
    collector = _Collector(package)
    for node in nodes:
        collector.visit(node)
    return collector.refs


def _catches_import_error(handler: ast.expr | None) -> bool:
    names = handler.elts if isinstance(handler, ast.Tuple) else [handler]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)


def _foreign_names(tree: ast.Module) -> set[str]:
    """Module-level names bound by imports from outside this package (stdlib and third-party)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] != PACKAGE)
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] != PACKAGE:
            names.update(a.asname or a.name for a in node.names)
    return names


def _decorator_root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _analyse(name: str, path: Path, source: str) -> _Module:
    tree = _strip_docstrings(ast.parse(source, filename=str(path)))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    foreign = _foreign_names(tree)
    parts: dict[str, _Part] = {}
    base: list[ast.AST] = []
    for node in tree.body:
        # A function decorated by something of this module or package counts as module-level code (the
        # decorator may register it somewhere); stdlib and third-party decorators (functools.cache,
        # torch.inference_mode, dataclass) leave it a part of its own.
        own_decorator = any(_decorator_root(d) not in foreign for d in getattr(node, "decorator_list", []))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not own_decorator:
            parts[node.name] = _Part([node], _collect([node], package))
        else:
            base.append(node)
    parts[BASE] = _Part(base, _collect(base, package))
    return _Module(name, path, parts)


@functools.cache
def _load(name: str) -> _Module:
    """The parts of module ``name``, read once per process (a workflow run sees one state of the code)."""
    path = module_file(name)
    return _analyse(name, path, path.read_text())


@dataclass
class Reach:
    """The parts of the package a script reaches: ``(module, part)`` pairs, data files, third-party imports."""

    parts: set[tuple[str, str]] = field(default_factory=set)
    third_party: set[str] = field(default_factory=set)

    @property
    def modules(self) -> set[str]:
        return {module for module, _ in self.parts}

    def data_files(self) -> list[Path]:
        """Non-Python files beside the reached modules (recursing into folders that are not packages)."""
        found: set[Path] = set()
        for folder in {module_file(m).parent for m in self.modules}:
            found.update(_data_files(folder))
        return sorted(found)

    def digest(self) -> str:
        """sha256 over the reached parts' syntax trees (docstrings removed) and the data files' bytes."""
        h = hashlib.sha256()
        for module, part in sorted(self.parts):
            h.update(f"{module}:{part}:{_load(module).parts[part].dump}\n".encode())
        for path in self.data_files():
            h.update(f"{path.relative_to(ROOT)}:{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
        return h.hexdigest()


def _data_files(folder: Path) -> list[Path]:
    found = []
    for path in folder.iterdir():
        if path.name.startswith(".") or path.name == "__pycache__":
            continue
        if path.is_file() and path.suffix not in (".py", ".pyc"):
            found.append(path)
        elif path.is_dir() and not (path / "__init__.py").exists():
            found.extend(_data_files(path))
    return found


class _Resolver:
    """The parts that one part's references resolve to (its direct dependencies)."""

    def __init__(self):
        self.targets: set[tuple[str, str]] = set()

    def add(self, module: str, part: str) -> None:
        if part == WHOLE:
            self.targets.update((module, name) for name in _load(module).parts)
        else:
            self.targets.add((module, part))

    def attribute(self, module: str, attr: str, seen: frozenset = frozenset()) -> None:
        """``module.attr``: a function or class of it, a submodule, or a name it imports."""
        mod = _load(module)
        if attr in mod.parts:
            self.add(module, attr)
        elif _is_module(f"{module}.{attr}"):
            self.add(f"{module}.{attr}", WHOLE)
        elif attr in mod.bindings and (module, attr) not in seen:
            target, target_attr = mod.bindings[attr]
            self.add(module, BASE)
            if target_attr is None:
                self.add(target, WHOLE)
            else:
                self.attribute(target, target_attr, seen | {(module, attr)})
        else:
            self.add(module, BASE)

    def chain(self, chain: tuple[str, ...], bindings: dict) -> None:
        target = bindings.get(chain[0])
        if target is None:  # a local, builtin or third-party name
            return
        module, attr = target
        if attr is not None:
            self.attribute(module, attr)
            return
        for name in chain[1:]:
            if _is_module(f"{module}.{name}"):
                module = f"{module}.{name}"
                continue
            self.attribute(module, name)
            return
        self.add(module, WHOLE)  # the module itself used as a value

    def refs(self, refs: _Refs, bindings: dict, module: str | None = None, local: set[str] = frozenset()) -> None:
        for name in refs.imported:
            self.add(name, BASE)
        for name in refs.modules:
            self.add(name, WHOLE)
        for chain in refs.chains:
            if chain[0] in local:
                self.add(module, chain[0])
            else:
                self.chain(chain, bindings)


@functools.cache
def _edges(module: str, part: str) -> frozenset[tuple[str, str]]:
    """What ``module``'s ``part`` depends on directly: what it names, and the module-level code it runs in."""
    mod = _load(module)
    refs = mod.parts[part].refs
    resolver = _Resolver()
    resolver.refs(refs, {**mod.bindings, **refs.bindings}, module, set(mod.parts) - {BASE})
    parent = module.rpartition(".")[0]
    if part != BASE:
        resolver.add(module, BASE)
    elif parent:
        resolver.add(parent, BASE)
    return frozenset(resolver.targets)


def reach(script: str | Path, *, also_files: Iterable[str | Path] = (), also_modules: Iterable[str] = ()) -> Reach:
    """What ``script`` reaches, plus what the Python files in ``also_files`` reach (code a job runs besides
    its script: a submission's files) and the package modules named in ``also_modules`` or in the
    non-Python ``also_files`` (servers launched with ``-m infbench...``)."""
    start, third_party = _Resolver(), set()
    for path in [Path(script), *map(Path, also_files)]:
        text = path.read_text(errors="replace")
        if path.suffix == ".py":
            refs = _collect([_strip_docstrings(ast.parse(text, filename=str(path)))], package="")
            start.refs(refs, refs.bindings)
            third_party |= refs.third_party
        else:
            start.refs(_Refs(modules={m for m in _MODULE_NAME.findall(text) if _is_module(m)}), {})
    for name in also_modules:
        start.add(name, WHOLE)
    seen: set[tuple[str, str]] = set()
    todo = list(start.targets)
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            third_party |= _load(node[0]).parts[node[1]].refs.third_party
            todo.extend(_edges(*node))
    return Reach(parts=seen, third_party=third_party)


def modules_named(value) -> list[str]:
    """Package modules named in the strings of a config value (e.g. server commands ``-m infbench.x``)."""
    found: set[str] = set()

    def walk(v):
        if isinstance(v, str):
            found.update(m for m in _MODULE_NAME.findall(v) if _is_module(m))
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)

    walk(value)
    return sorted(found)


def digest(script: str | Path, *, also_files: Iterable[str | Path] = (), also_modules: Iterable[str] = ()) -> str:
    """The ``code`` parameter of the rule running ``script`` (see the module docstring)."""
    return reach(script, also_files=also_files, also_modules=also_modules).digest()


def _files_state(paths: Iterable[str | Path]) -> str:
    """sha256 over the size and modification time of each of ``paths``."""
    h = hashlib.sha256()
    for path in sorted(map(Path, paths)):
        stat = path.stat()
        h.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return h.hexdigest()


class DigestCache:
    """Digests kept in a JSON file while no file of the package changes (size or modification time), so
    that a workflow that is up to date starts without parsing the package again."""

    def __init__(self, path: str | Path, scripts_dir: str | Path):
        self.path, self.scripts_dir = Path(path), Path(scripts_dir)
        package = [p for p in ROOT.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        self.state = _files_state([*package, *self.scripts_dir.glob("*.py")])
        try:
            stored = json.loads(self.path.read_text())
        except (OSError, ValueError):
            stored = {}
        self.digests: dict[str, str] = stored.get("digests", {}) if stored.get("state") == self.state else {}

    def digest(self, script: str, also_files: Iterable[str | Path] = (), also_modules: Iterable[str] = ()) -> str:
        """``digest()`` of ``scripts_dir/<script>.py``; ``also_files`` are part of the key with their state."""
        also_files, also_modules = sorted(map(str, also_files)), sorted(also_modules)
        key = json.dumps([script, also_files, _files_state(also_files) if also_files else None, also_modules])
        if key not in self.digests:
            self.digests[key] = digest(
                self.scripts_dir / f"{script}.py", also_files=also_files, also_modules=also_modules
            )
            atomic.write_json(self.path, {"state": self.state, "digests": self.digests})
        return self.digests[key]
