"""llama.cpp's own command-line tools (``llama-perplexity``, ``llama-imatrix``, ``llama-quantize``), built
from the llama.cpp sources vendored in the installed llama-cpp-python's sdist, so that the tools run the
same llama.cpp as the library the pipeline quantizes and verifies with.

The pipeline itself needs none of them (it quantizes through the library, :mod:`infbench.compression.
baselines.gguf`); they serve the checks against llama.cpp's own programs: that ``llama-quantize`` accepts the
pipeline's imatrix file (tests/compression/test_imatrix_gguf.py) and that the divergence diagnostics agree
with ``llama-perplexity --kl-divergence`` (:mod:`infbench.compression.kld_crosscheck`, docs/compression.md).

``python -m infbench.llama_tools build`` downloads the sdist with pip (the package registry), compiles the
three tools with CMake, ``GGML_NATIVE=OFF`` (as the wheel: llama.cpp's AMX path segfaults on some CPUs) and
static libraries, and keeps them in ``${XDG_CACHE_HOME:-~/.cache}/infbench/llama-tools/<version>-ggml-native-
off/`` with a ``build.json`` (version, flags, compile seconds), so only the first call compiles. Standard
library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "llama-cpp-python"
TOOLS = ("llama-perplexity", "llama-imatrix", "llama-quantize")
CMAKE_FLAGS = (
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


class ToolsMissing(RuntimeError):
    """The tools are not built for the installed llama-cpp-python."""


def version() -> str:
    return metadata.version(DISTRIBUTION)


def cache_dir(llama_cpp_version: str | None = None) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "infbench" / "llama-tools" / f"{llama_cpp_version or version()}-ggml-native-off"


def tool(name: str) -> Path:
    """The cached binary ``name``; :class:`ToolsMissing` says how to build it."""
    path = cache_dir() / name
    if not path.is_file():
        raise ToolsMissing(
            f"{path} is missing: build llama.cpp's tools once with `python -m infbench.llama_tools build` (minutes)"
        )
    return path


def _sdist(work: Path, llama_cpp_version: str) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"{DISTRIBUTION}=={llama_cpp_version}",
            "-d",
            str(work),
        ],
        check=True,
    )
    archive = next(work.glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    return next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))


def build(jobs: int | None = None) -> Path:
    """Build the tools for the installed llama-cpp-python (nothing when they are cached); their folder."""
    llama_cpp_version = version()
    out = cache_dir(llama_cpp_version)
    if all((out / name).is_file() for name in TOOLS):
        return out
    jobs = jobs or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="llama-tools-") as tmp:
        work = Path(tmp)
        source = _sdist(work, llama_cpp_version)
        start = time.monotonic()
        subprocess.run(["cmake", "-S", str(source), "-B", str(work / "build"), *CMAKE_FLAGS], check=True)
        subprocess.run(
            ["cmake", "--build", str(work / "build"), "--config", "Release", "-j", str(jobs), "--target", *TOOLS],
            check=True,
        )
        seconds = time.monotonic() - start
        staged = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=_parent(out)))
        staged.chmod(0o755)
        for name in TOOLS:
            shutil.copy2(work / "build" / "bin" / name, staged / name)
        (staged / "build.json").write_text(
            json.dumps(
                {
                    "distribution": DISTRIBUTION,
                    "version": llama_cpp_version,
                    "cmake_flags": list(CMAKE_FLAGS),
                    "tools": list(TOOLS),
                    "jobs": jobs,
                    "compile_s": round(seconds, 1),
                },
                indent=2,
            )
        )
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    return out


def _parent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="compile the tools once (kept in the cache)")
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel compile jobs (default: all cores)")
    sub.add_parser("where", help="print the tools' folder")
    args = parser.parse_args(argv)
    if args.command == "build":
        out = build(args.jobs)
        print(out)
        print((out / "build.json").read_text())
    else:
        print(cache_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main())
