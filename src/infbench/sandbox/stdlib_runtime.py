"""A sandbox policy for a Python program that may use the standard library and nothing else.

Read-only inside: the base interpreter (never a virtual environment's), the directories on its ``sys.path``
under ``-I -S`` (the standard library and its extension modules), the shared libraries those load (their
``ldd`` closure, each file bound alone, at the real path of its directory) and ``/etc/ld.so.cache``. The
interpreter's own ``site-packages`` (inside the standard library directory on most builds) is an empty
directory. No ``/usr``, no third-party package, no infbench, no project file: model output judged here
(:mod:`infbench.sandbox.judge`) sees a Python and its standard library, a private ``/tmp`` and nothing else.

Where ``ldd`` is missing, the system library directories are bound whole instead
(:attr:`StdlibRuntime.libraries` says which).
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys

from pydantic import BaseModel, ConfigDict

from infbench.sandbox.policy import SYSTEM_DIRS, Policy

# ldd lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
_LDD_PATH = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")
_PROBE = (
    "import json, sys, sysconfig; print(json.dumps({'path': sys.path, "
    "'site': sorted({sysconfig.get_path('purelib'), sysconfig.get_path('platlib')})}))"
)
ENV = {"PATH": "/nonexistent", "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


class StdlibRuntime(BaseModel):
    model_config = ConfigDict(frozen=True)
    interpreter: str  # the base interpreter, run as ``interpreter -I -S``
    read_only: tuple[str, ...]  # what is bound, each at its own path
    hidden: tuple[str, ...]  # site-packages directories inside what is bound
    libraries: str  # "ldd closure" or "system directories (no ldd)"


def base_interpreter() -> str:
    """The interpreter a virtual environment was made from (or the running one, outside a venv)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _ldd_closure(files: list[str]) -> list[str]:
    ldd = shutil.which("ldd")
    out = subprocess.run([ldd, *files], capture_output=True, text=True, timeout=120).stdout
    found = {m.group(1) for m in _LDD_PATH.finditer(out)}
    # bound at the real path of its directory: /lib is a link to usr/lib inside the sandbox as outside
    return sorted(os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p)) for p in found)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


@functools.lru_cache(maxsize=1)
def runtime() -> StdlibRuntime:
    interpreter = base_interpreter()
    probe = json.loads(
        subprocess.run(
            [interpreter, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
        ).stdout
    )
    dirs = sorted({os.path.realpath(p) for p in probe["path"] if os.path.isdir(p)})
    dirs = [d for d in dirs if not _under(d, [o for o in dirs if o != d])]  # a directory inside another: once
    site = sorted({s for s in map(os.path.realpath, probe["site"]) if os.path.isdir(s) and _under(s, dirs)})
    if shutil.which("ldd"):
        extensions = [
            f for d in dirs for f in glob.glob(os.path.join(d, "**", "*.so"), recursive=True) if not _under(f, site)
        ]
        libraries, kind = _ldd_closure([interpreter, *extensions]), "ldd closure"
    else:
        libraries, kind = [p for p in SYSTEM_DIRS if os.path.isdir(p)], "system directories (no ldd)"
    etc = [p for p in ("/etc/ld.so.cache",) if os.path.exists(p)]
    read_only = [interpreter, *dirs, *etc, *(p for p in libraries if not _under(p, dirs))]
    return StdlibRuntime(
        interpreter=interpreter, read_only=tuple(dict.fromkeys(read_only)), hidden=tuple(site), libraries=kind
    )


def policy(*, tmp_bytes: int) -> Policy:
    """The policy of a standard-library-only Python program: cwd ``/tmp`` (``tmp_bytes`` at most), nothing
    writable besides, an environment of a locale and ``HOME=/tmp``."""
    rt = runtime()
    return Policy(read_only=rt.read_only, site_dirs=rt.hidden, env=dict(ENV), cwd="/tmp", tmp_bytes=tmp_bytes)
