"""The pipeline's side of the worker protocol: a submission in its own process.

Every request has a deadline; a worker that crashes, hangs or answers
nonsense raises :class:`WorkerFailure` with the reason and the tail of its
stderr, and the process group is always killed on exit.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import torch

from infbench.errors import InfbenchError


class WorkerFailure(InfbenchError):
    def __init__(self, cause: str, detail: str = ""):
        self.cause = cause
        super().__init__(f"{cause}{': ' + detail if detail else ''}")


class SubmissionProcess:
    def __init__(self, package: str | Path, *, device: str = "cpu", threads: int = 1, timeout_s: float = 3600.0,
                 log_path: str | Path | None = None):
        self.package = Path(package).resolve()
        self.device, self.threads, self.timeout_s = device, threads, timeout_s
        self.log_path = Path(log_path) if log_path else None
        self.deadline = time.monotonic() + timeout_s
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "SubmissionProcess":
        self._ipc = tempfile.TemporaryDirectory(prefix="infbench-ipc-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.ipc_dir = Path(self._ipc.name)
        self._stderr = open(self.log_path, "ab") if self.log_path else tempfile.TemporaryFile()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
        env.update(HF_HUB_OFFLINE="1", HF_HOME=str(self.ipc_dir / "hf"), TOKENIZERS_PARALLELISM="false",
                   OMP_NUM_THREADS=str(self.threads), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "infbench.compression.worker", str(self.package), str(self.ipc_dir),
             self.device, str(self.threads)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env,
            cwd=self.ipc_dir, start_new_session=True, text=True, bufsize=1,
        )
        self._replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._replies.put(line)
        self._replies.put(None)

    def stderr_tail(self, n: int = 2000) -> str:
        self._stderr.flush()
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - n))
        return self._stderr.read().decode(errors="replace")

    def request(self, cmd: str, **args) -> dict:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerFailure("timeout", f"the {self.timeout_s:.0f} s budget is spent")
        try:
            self.proc.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerFailure("crash", f"worker exited ({self.proc.poll()}) {self.stderr_tail()}") from None
        try:
            line = self._replies.get(timeout=remaining)
        except queue.Empty:
            raise WorkerFailure("timeout", f"'{cmd}' did not answer within the {self.timeout_s:.0f} s budget") from None
        if line is None:
            raise WorkerFailure("crash", f"worker exited ({self.proc.wait()}) during '{cmd}': {self.stderr_tail()}")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            raise WorkerFailure("protocol", f"unreadable reply to '{cmd}': {line[:200]!r}") from None
        if not reply.get("ok"):
            raise WorkerFailure(f"{cmd} failed", reply.get("error", "") + "\n" + reply.get("traceback", ""))
        return reply

    def load(self) -> dict:
        return self.request("load")

    def logits(self, input_ids: np.ndarray, n_last: int) -> np.ndarray:
        name = f"logits-{uuid.uuid4().hex}.npy"
        reply = self.request("logits", ids=np.asarray(input_ids).tolist(), n_last=int(n_last), out=name)
        path = self.ipc_dir / name
        try:
            array = np.load(path)
        finally:
            path.unlink(missing_ok=True)
        if list(array.shape) != reply["shape"]:
            raise WorkerFailure("protocol", f"logits file shape {array.shape} != reported {reply['shape']}")
        return array

    def logits_fn(self):
        """A scorer-compatible ``logits_fn`` backed by this process."""

        def fn(input_ids: torch.Tensor, n_last: int) -> torch.Tensor:
            return torch.from_numpy(self.logits(input_ids.cpu().numpy(), n_last))

        return fn

    def generate(self, input_ids: list[int], max_new_tokens: int, *, stop_ids: list[int] = (),
                 stop_texts: list[str] = ()) -> tuple[list[int], list[float]]:
        """Greedy tokens and their arrival times; EOS and stop texts end it only when given."""
        reply = self.request("generate", ids=[int(t) for t in input_ids], max_new_tokens=int(max_new_tokens),
                             stop_ids=list(stop_ids), stop_texts=list(stop_texts))
        return reply["tokens"], reply["times"]

    def release(self) -> dict:
        return self.request("release")

    def access(self) -> dict:
        return self.request("access")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._stderr.close()
        self._ipc.cleanup()
