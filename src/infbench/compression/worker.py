"""The process a submission runs in, inside the sandbox: ``python -m infbench.compression.worker ...``.

Nothing this process says about itself is part of a verdict: the pipeline measures its memory from outside
(:mod:`infbench.sandbox.meter`), times the steps and computes every log-probability and argmax from the raw
logits. The process only runs the package's forward pass and passes on what it returns.

Protocol: one JSON request per line on stdin; one reply per request on a private copy of stdout (the
submission's own prints go to stderr). ``prefill``, ``step`` and (runtimes of :data:`package_api.TRUSTED` only)
``score`` call the runner (:mod:`infbench.compression.package_api`) and reply with the shape it returned; when
that is the shape asked for, the logits are in the shared buffer (``--logits-fd``,
:mod:`infbench.compression.harness.transport`) before the reply is written. The pipeline sends the next request
only after reading a reply, so the package never holds a token it has not yet scored.

Before anything of the package is read, the worker imports its runtime's modules (``--preload``), creates the
runtime state of a first inference (:mod:`infbench.compression.warm_up`: on CUDA, and with ``--warm-up`` the
source's shapes on the CPU) and trims the heap, exactly as the baseline worker (``--baseline``: no package at
all) does, so the two differ by what the package loads. An in-process audit hook records reads outside the
package and network connections: a diagnostic only (a package can reach and empty it).
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import importlib
import json
import os
import sys
import time
import traceback
from pathlib import Path

# The worker's own imports, made in the baseline worker too (so neither side is charged for them): numpy through
# the in-process storage count and the frames, the manifest and runtime loaders. torch only where the runtime
# imports it (--preload): a llama.cpp worker imports llama.cpp, not torch.
import numpy as np

from infbench.compression import inprocess_memory, runtimes
from infbench.compression.harness.transport import FrameWriter
from infbench.compression.package_api import TRUSTED
from infbench.compression.submission import load_manifest

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT

# The distributions' modules this worker imports itself, beyond its runtime's and the standard library: its
# sandbox binds their requirement closure (infbench.sandbox.runtime); tests/sandbox/test_sandbox.py checks the list.
IMPORTS = ("numpy", "pydantic", "yaml")


def trim_heap() -> None:
    """Return freed memory to the OS before the parent measures (glibc ``malloc_trim``; a no-op elsewhere)."""
    gc.collect()
    name = ctypes.util.find_library("c")
    if name:
        libc = ctypes.CDLL(name)
        if hasattr(libc, "malloc_trim"):
            libc.malloc_trim(0)


class AccessLog:
    """Audit hook state (diagnostic): reads outside the allowed roots and network connections."""

    def __init__(self, allowed: list[Path]):
        self.allowed = [str(p.resolve()) for p in allowed]
        self.own: list[str] = []
        self.reads: list[str] = []
        self.connections: list[str] = []

    @staticmethod
    def _under(real: str, roots: list[str]) -> bool:
        return any(real == root or real.startswith(root + os.sep) for root in roots)

    def __call__(self, event: str, args) -> None:
        if event == "os.mkdir" and isinstance(args[0], (str, bytes)):
            self.own.append(os.path.realpath(os.fsdecode(args[0])))
        elif event == "open":
            path, mode, flags = args
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if not isinstance(path, str):
                return
            real = os.path.realpath(path)
            writing = (mode is not None and any(c in mode for c in "wax+")) or (mode is None and flags & _WRITE_FLAGS)
            if writing:
                if not os.path.exists(real) and len(self.own) < 100_000:
                    self.own.append(real)
            elif not self._under(real, self.allowed) and not self._under(real, self.own) and len(self.reads) < 1000:
                self.reads.append(real)
        elif event in ("socket.connect", "socket.sendto") and len(self.connections) < 1000:
            self.connections.append(repr(args[1]) if len(args) > 1 else repr(args))


def allowed_roots(package: Path) -> list[Path]:
    import infbench

    roots = {
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.exec_prefix),
        Path(infbench.__file__).parent,
        package,
        Path("/usr"),
        Path("/lib"),
        Path("/lib64"),
        Path("/etc"),
        Path("/proc"),
        Path("/sys"),
        Path("/dev"),
        Path("/tmp"),
    }
    return sorted(roots)


class Requests:
    """Request lines from stdin."""

    def __init__(self, fd: int = 0):
        self.lines = os.fdopen(fd, "rb", buffering=1 << 16)

    def next(self) -> dict | None:
        for line in self.lines:
            if line.strip():
                return json.loads(line)
        return None


class Worker:
    def __init__(self, package: Path, frames: FrameWriter, args: argparse.Namespace, access: AccessLog):
        self.package, self.frames, self.access = package, frames, access
        self.device, self.threads, self.kv_cache_mib = args.device, args.threads, args.kv_cache_mib
        self.runner = None
        self.runtime = None

    def _inprocess_resident(self) -> int:
        """The package's live tensors and arrays, counted in this process: a second figure only; for runtime
        ``vllm`` (the pipeline's and vLLM's code only) the tensors of the model the engine loaded, ``S_res``."""
        if self.runtime == "vllm":
            return int(self.runner.model_bytes())
        native = getattr(self.runner, "native_resident_bytes", None)
        return inprocess_memory.resident_bytes(self.device, int(native()) if native else 0)

    def _frame(self, req, logits) -> dict:
        """The logits in the shared buffer when they have the shape the pipeline asked for (else it fails
        ``logits_shape`` and reads nothing); the reply names their shape."""
        shape = [int(n) for n in getattr(logits, "shape", ())]
        if shape == req["shape"]:
            self.frames.write(int(req["request"]), logits)
        return {"shape": shape}

    def cmd_load(self, req):
        manifest = load_manifest(self.package)
        self.runtime = manifest.runtime
        start = time.perf_counter()
        self.runner = runtimes.load_runner(
            self.package, manifest, self.device, self.threads, kv_cache_mib=self.kv_cache_mib
        )
        load_s = time.perf_counter() - start
        inprocess = self._inprocess_resident()
        trim_heap()
        return {"load_s": load_s, "inprocess_resident_bytes": inprocess}

    def cmd_prefill(self, req):
        rows = [np.asarray(row, dtype=np.int64) for row in req["rows"]]
        return self._frame(req, self.runner.prefill(rows, int(req["max_new_tokens"])))

    def cmd_step(self, req):
        tokens, rows = np.asarray(req["tokens"], dtype=np.int64), np.asarray(req["rows"], dtype=np.int64)
        return self._frame(req, self.runner.step(tokens, rows))

    def cmd_score(self, req):
        if self.runtime not in TRUSTED:
            raise PermissionError(f"one-pass scoring is for the pipeline's own runtimes, not '{self.runtime}'")
        return self._frame(req, self.runner.score(np.asarray(req["ids"], dtype=np.int64), int(req["n_last"])))

    def cmd_release(self, req):
        self.runner.release()
        inprocess = self._inprocess_resident()
        trim_heap()
        return {"inprocess_resident_bytes": inprocess}

    def cmd_access(self, req):
        return {"reads": sorted(set(self.access.reads)), "connections": self.access.connections}


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m infbench.compression.worker")
    p.add_argument("--package", type=Path)
    p.add_argument("--logits-fd", type=int, required=True, help="the shared logits buffer (a memfd)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--preload", default="", help="comma-separated modules imported before anything else")
    p.add_argument("--baseline", action="store_true", help="import the runtime, load nothing, wait for exit")
    p.add_argument("--warm-up", default=None, help="the source's shapes to run on the CPU first (JSON, warm_up.py)")
    p.add_argument("--kv-cache-mib", type=int, default=None, help="vLLM's KV cache (runtime vllm)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the submission's prints go to stderr
    sys.stdout = sys.stderr
    for module in filter(None, args.preload.split(",")):
        importlib.import_module(module)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(args.threads)
    if args.device.startswith("cuda") or args.warm_up:
        from infbench.compression import warm_up

        if args.device.startswith("cuda"):
            warm_up.cuda(args.device)
        else:
            warm_up.source_shapes(warm_up.SourceShapes.model_validate_json(args.warm_up))
    trim_heap()
    requests = Requests()
    if args.baseline:
        protocol.write(json.dumps({"ok": True, "ready": True}) + "\n")
        while requests.next() is not None:  # until the pipeline kills the sandbox or closes stdin
            pass
        return 0
    package = args.package.resolve()
    access = AccessLog(allowed_roots(package))
    sys.addaudithook(access)
    worker = Worker(package, FrameWriter(args.logits_fd), args, access)
    protocol.write(json.dumps({"ok": True, "ready": True}) + "\n")
    while (req := requests.next()) is not None:
        try:
            reply = {"ok": True, **getattr(worker, f"cmd_{req['cmd']}")(req)}
        except Exception as exc:  # reported to the pipeline, which writes the failure record
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        protocol.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
