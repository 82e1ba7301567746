"""The process a submission runs in: ``python -m infbench.compression.worker PACKAGE``.

The pipeline talks to it over a line protocol (one JSON request on stdin, one
JSON reply on a private copy of stdout; the submission's own prints go to
stderr). Before the submission is imported, an audit hook records every file
it opens for reading outside its package and the runtime's libraries, and
every network connection. Logits travel as ``.npy`` files in a directory the
pipeline owns, so the pipeline itself computes log-probs from raw logits.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT


class AccessLog:
    """Audit hook state: reads outside the allowed roots and network connections.

    Files and directories the process creates itself (a runtime's own scratch
    files, e.g. GPTQModel's offload directory) may be read back: they hold only
    what the process wrote, not data from outside its package.
    """

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
            writing = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & _WRITE_FLAGS)
            if writing:
                if not os.path.exists(real) and len(self.own) < 100_000:
                    self.own.append(real)
            elif not self._under(real, self.allowed) and not self._under(real, self.own) and len(self.reads) < 1000:
                self.reads.append(real)
        elif event in ("socket.connect", "socket.sendto") and len(self.connections) < 1000:
            self.connections.append(repr(args[1]) if len(args) > 1 else repr(args))


def allowed_roots(package: Path, ipc_dir: Path) -> list[Path]:
    import infbench

    roots = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(infbench.__file__).parent,
             package, ipc_dir, Path("/usr"), Path("/lib"), Path("/lib64"), Path("/etc"), Path("/proc"),
             Path("/sys"), Path("/dev")}
    return sorted(roots)


class Worker:
    def __init__(self, package: Path, ipc_dir: Path, device: str, threads: int, access: AccessLog):
        self.package, self.ipc_dir, self.device, self.threads = package, ipc_dir, device, threads
        self.access = access
        self.runner = None
        self.runtime = None
        self.tokenizer = None

    def _resident(self) -> int:
        from infbench.compression.storage import resident_bytes

        native = getattr(self.runner, "native_resident_bytes", None)
        # Only the pipeline's own runtimes may declare workspace; a python-runtime
        # submission's every live array counts.
        workspace = getattr(self.runner, "workspace", None) if self.runtime != "python" else None
        return resident_bytes(self.device, int(native()) if native else 0, workspace() if workspace else [])

    def cmd_load(self, req):
        import torch

        from infbench.compression.runtimes import load_runner
        from infbench.compression.submission import load_manifest

        torch.set_num_threads(self.threads)
        manifest = load_manifest(self.package)
        self.runtime = manifest.runtime
        start = time.perf_counter()
        self.runner = load_runner(self.package, manifest, self.device, self.threads)
        return {"load_s": time.perf_counter() - start, "resident_bytes": self._resident()}

    def cmd_logits(self, req):
        import numpy as np

        ids = np.asarray(req["ids"], dtype=np.int64)
        logits = np.asarray(self.runner.logits(ids, int(req["n_last"])))
        expected = (ids.shape[0], int(req["n_last"]))
        if logits.ndim != 3 or logits.shape[:2] != expected:
            raise ValueError(f"logits() returned shape {logits.shape}, expected {expected + ('V',)}")
        out = self.ipc_dir / req["out"]
        np.save(out, logits.astype(np.float32, copy=False))
        return {"shape": list(logits.shape), "path": str(out)}

    def _stopped(self, tokens: list[int], stop_ids: set[int], stop_texts: list[str]) -> bool:
        """Answer generation stops at EOS or once the generated text holds a stop sequence."""
        if tokens[-1] in stop_ids:
            return True
        if not stop_texts:
            return False
        if self.tokenizer is None:
            from transformers import AutoTokenizer

            from infbench.compression.submission import load_manifest

            self.tokenizer = AutoTokenizer.from_pretrained(self.package / load_manifest(self.package).tokenizer)
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return any(s in text for s in stop_texts)

    def cmd_generate(self, req):
        tokens, stamps = [], []
        stop_ids, stop_texts = set(req.get("stop_ids", [])), [s for s in req.get("stop_texts", []) if s]
        stream = self.runner.generate([int(t) for t in req["ids"]], int(req["max_new_tokens"]))
        try:
            for token in stream:
                stamps.append(time.perf_counter())
                tokens.append(int(token))
                if len(tokens) >= int(req["max_new_tokens"]) or self._stopped(tokens, stop_ids, stop_texts):
                    break
        finally:  # a generator stopped early runs its clean-up now, before anything is measured
            if hasattr(stream, "close"):
                stream.close()
        return {"tokens": tokens, "times": stamps}

    def cmd_release(self, req):
        self.runner.release()
        return {"resident_bytes": self._resident()}

    def cmd_access(self, req):
        return {"reads": sorted(set(self.access.reads)), "connections": self.access.connections}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    package, ipc_dir, device, threads = Path(argv[0]).resolve(), Path(argv[1]).resolve(), argv[2], int(argv[3])
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the submission's prints go to stderr
    sys.stdout = sys.stderr
    access = AccessLog(allowed_roots(package, ipc_dir))
    sys.addaudithook(access)
    worker = Worker(package, ipc_dir, device, threads, access)
    for line in sys.stdin:
        req = json.loads(line)
        if req["cmd"] == "exit":
            break
        try:
            reply = {"ok": True, **getattr(worker, f"cmd_{req['cmd']}")(req)}
        except Exception as exc:  # reported to the pipeline as a failure record
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        protocol.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
