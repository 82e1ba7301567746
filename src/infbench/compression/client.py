"""The pipeline's side of the worker protocol: a submission in its own sandboxed process.

The worker runs under :mod:`infbench.sandbox` (bubblewrap: it sees a fresh copy of its package read-only at
``/package``, the Python runtime its modules need, a private ``/tmp`` and ``/dev/shm``; no network, its own
PID and IPC namespaces and memory cgroup, nothing of the host it can write). Every figure a verdict uses is
taken here, outside it: memory from its cgroup or ``/proc`` (:meth:`SubmissionProcess.memory`, a 10 ms peak
sampler), and the time of every reply as its line crosses the pipe. Logits come through a shared buffer the
pipeline owns and wipes before every memory measurement, in exactly the shape asked for
(:mod:`infbench.compression.harness.transport`). Its output reaches the log through a pipe.

Every request has a deadline; a worker that crashes, hangs or answers nonsense raises :class:`WorkerFailure`
with the reason and the tail of its stderr, and everything in the sandbox is always killed on exit.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from infbench.checks import CheckFailed
from infbench.compression.harness.transport import LogitsBuffer, frame_bytes
from infbench.compression.runtimes import WorkerLaunch, optional_modules
from infbench.compression.warm_up import SourceShapes
from infbench.compression.worker import IMPORTS
from infbench.config.model import SandboxSettings
from infbench.errors import InfbenchError
from infbench.sandbox import meter, page_cache
from infbench.sandbox.launch import Sandboxed, SandboxRecord, SandboxUnavailable
from infbench.sandbox.policy import Policy, base_env, python_policy

PACKAGE = "/package"  # where the worker sees its package
DEFAULT_LAUNCH = WorkerLaunch()  # this interpreter, the worker profile


class WorkerFailure(InfbenchError):
    def __init__(self, cause: str, detail: str = ""):
        self.cause = cause
        super().__init__(f"{cause}{': ' + detail if detail else ''}")


class SubmissionProcess:
    """A worker in its sandbox: the package copied to a fresh directory and mounted at ``/package``, its output
    copied into ``log`` (a path, opened once in append mode, or an open binary file), its memory cgroup limited
    to ``memory_limit_bytes``; ``vocab_size``: the source's vocabulary, the last dimension of every logits
    answer; ``max_logits``: the most logit values one answer holds (the shared buffer is sized for them);
    ``warm_up``: the source's shapes it runs on the CPU before anything else
    (:mod:`infbench.compression.warm_up`)."""

    def __init__(
        self,
        package: str | Path | None,
        *,
        sandbox: SandboxSettings,
        preload: list[str],
        device: str = "cpu",
        threads: int = 1,
        timeout_s: float = 3600.0,
        log_path: str | Path | BinaryIO | None = None,
        baseline: bool = False,
        memory_limit_bytes: int | None = None,
        vocab_size: int | None = None,
        max_logits: int = 1,
        warm_up: SourceShapes | None = None,
        launch: WorkerLaunch = DEFAULT_LAUNCH,
    ):
        self.warm_up, self.max_logits, self.launch = warm_up, max_logits, launch
        self.package = Path(package).resolve() if package else None
        self.vocab_size, self._requests = vocab_size, 0
        self.sandbox_settings, self.preload, self.baseline = sandbox, list(preload), baseline
        self.device, self.threads, self.timeout_s = device, threads, timeout_s
        self.log = log_path
        self.memory_limit_bytes = memory_limit_bytes
        self.deadline = time.monotonic() + timeout_s
        self.box: Sandboxed | None = None
        self.sampler: meter.PeakSampler | None = None

    # -- start and stop --------------------------------------------------------------------------------
    def _policy(self, package: Path | None) -> Policy:
        modules = (*IMPORTS, *self.preload, *optional_modules(self.preload))
        policy = python_policy(
            modules=modules,
            mounts={PACKAGE: str(package)} if package else {},
            env=base_env(self.threads, self.launch.python),
            read_only=list(self.launch.read_only),
            cuda=self.device.startswith("cuda"),
            tmp_bytes=self.sandbox_settings.tmp_mb << 20,
            python=None if self.launch.python == sys.executable else self.launch.python,
        )
        return policy.model_copy(update={"seccomp": self.launch.seccomp})

    def _command(self) -> list[str]:
        cmd = [
            self.launch.python,
            "-m",
            "infbench.compression.worker",
            "--logits-fd",
            str(self._buffer.fd),
            "--device",
            self.device,
            "--threads",
            str(self.threads),
            "--preload",
            ",".join(self.preload),
        ]
        if self.warm_up is not None:
            cmd += ["--warm-up", self.warm_up.model_dump_json()]
        if self.launch.kv_cache_mib is not None:
            cmd += ["--kv-cache-mib", str(self.launch.kv_cache_mib)]
        return cmd + (["--baseline"] if self.baseline else ["--package", self.policy.path(PACKAGE)])

    def _stage(self) -> Path | None:
        """A fresh copy of the package: the sandbox mounts it, so no mount of it names where the package lives
        (the workspace, ``results/``)."""
        if self.package is None:
            return None
        self._staged = tempfile.TemporaryDirectory(prefix="infbench-package-")
        return Path(shutil.copytree(self.package, Path(self._staged.name) / "package", symlinks=True))

    def __enter__(self) -> SubmissionProcess:
        self._buffer = LogitsBuffer(frame_bytes((self.max_logits,)))
        self._staged = None
        if self.log is None:
            self._log = open(os.devnull, "ab")
        elif isinstance(self.log, (str, Path)):
            self._log = open(self.log, "ab")
        else:
            self._log = None
        try:
            self.policy = self._policy(self._stage())
        except OSError as exc:
            self._cleanup()
            raise WorkerFailure("package", f"cannot copy the package for its sandbox: {exc}") from None
        self.box = Sandboxed(
            self.policy,
            self._command(),
            allow_unsandboxed=self.sandbox_settings.allow_unsandboxed,
            network="none (own network namespace, loopback only)",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log or self.log,
            memory_limit_bytes=self.memory_limit_bytes,
            pass_fds=(self._buffer.fd,),
        )
        try:
            self.box.__enter__()
        except SandboxUnavailable as exc:
            self._cleanup()
            raise WorkerFailure("sandbox", str(exc)) from None
        self._replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.sampler = meter.PeakSampler(self.box.pids).__enter__()
        self.sampler.phase("start")
        self._started = False
        return self

    def wait_started(self) -> None:
        """The worker's first line, sent once its runtime is imported: awaited by the first request or
        measurement, so that other work (the baseline worker) overlaps the import."""
        if not self._started:
            self._reply("start")
            self._started = True

    def renew_budget(self) -> None:
        """``timeout_s`` from now: for a worker started ahead of its turn (its import overlapping another
        worker's work), whose budget counts from when it is used."""
        self.deadline = time.monotonic() + self.timeout_s

    def forget_page_cache(self) -> dict:
        """Drop the page cache of every file bound into this sandbox (:mod:`infbench.sandbox.page_cache`), before
        it runs any code of the package: nothing an earlier sandbox left resident is left to read."""
        return page_cache.forget(self.policy.read_only)

    def limit_memory(self, nbytes: int) -> None:
        """The sandbox's hard memory limit, set before the package is loaded (it depends on the baseline
        worker, measured while this one imports its runtime)."""
        self.memory_limit_bytes = nbytes
        self.box.limit_memory(nbytes)

    def _read(self) -> None:
        for line in self.box.proc.stdout:
            self._replies.put((time.perf_counter(), line))
        self._replies.put((time.perf_counter(), None))

    def _cleanup(self) -> None:
        if self._log is not None:
            self._log.close()
        self._buffer.close()
        if self._staged is not None:
            self._staged.cleanup()

    def __exit__(self, *exc) -> None:
        # Everything is measured by now: the sandbox is killed at once (a graceful exit of an interpreter
        # holding torch took 1-2 s per worker, three workers per verification).
        if self.sampler:
            self.sampler.__exit__(None, None, None)
        if self.box:
            self.box.__exit__(None, None, None)
        self._cleanup()

    @property
    def sandbox_record(self) -> SandboxRecord | None:
        return self.box.record if self.box else None

    # -- the protocol ----------------------------------------------------------------------------------
    def stderr_tail(self, n: int = 2000) -> str:
        return self.box.output_tail(n)

    def _exited(self, during: str) -> WorkerFailure:
        """Why the worker is gone: killed at its memory limit, or crashed."""
        code = self.box.proc.wait()
        if self.box.oom_kills():
            limit = self.box.cgroup.limit_bytes or 0
            return WorkerFailure(
                "memory_limit",
                f"the sandbox reached its memory limit ({limit / 2**30:.3f} GiB: "
                f"the largest storage limit plus the empty worker plus the "
                f"allowance) during '{during}' and was killed",
            )
        return WorkerFailure("crash", f"worker exited ({code}) during '{during}': {self.stderr_tail()}")

    def _send(self, line: bytes) -> None:
        try:
            self.box.proc.stdin.write(line)
            self.box.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._exited("request") from None

    def _line(self, cmd: str) -> tuple[float, dict]:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerFailure("timeout", f"the {self.timeout_s:.0f} s budget is spent")
        try:
            stamp, line = self._replies.get(timeout=remaining)
        except queue.Empty:
            raise WorkerFailure("timeout", f"'{cmd}' did not answer within the {self.timeout_s:.0f} s budget") from None
        if line is None:
            raise self._exited(cmd)
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            raise WorkerFailure("protocol", f"unreadable reply to '{cmd}': {line[:200]!r}") from None
        if not isinstance(reply, dict):
            raise WorkerFailure("protocol", f"reply to '{cmd}' is not an object: {line[:200]!r}")
        return stamp, reply

    def _reply(self, cmd: str) -> dict:
        _, reply = self._line(cmd)
        if not reply.get("ok"):
            raise WorkerFailure(f"{cmd} failed", str(reply.get("error", "")) + "\n" + str(reply.get("traceback", "")))
        return reply

    def request(self, cmd: str, **args) -> dict:
        self.wait_started()
        self.sampler.phase(cmd)
        self._send((json.dumps({"cmd": cmd, **args}) + "\n").encode())
        return self._reply(cmd)

    def load(self) -> dict:
        return self.request("load")

    def _logits(self, cmd: str, expected: list[int], **args) -> torch.Tensor:
        """Raw logits of ``expected`` shape (the last dimension the source's vocabulary). The worker must say
        that shape (else ``logits_shape``: every asked position, each over the source's whole vocabulary, as a
        smaller one would concentrate mass), then have exactly that frame in the buffer (else
        ``logits_transport``). :attr:`replied_at`: when the reply arrived (this process's clock)."""
        self._requests += 1
        self.wait_started()
        self.sampler.phase(cmd)
        self._send((json.dumps({"cmd": cmd, **args, "request": self._requests, "shape": expected}) + "\n").encode())
        self.replied_at, reply = self._line(cmd)
        if not reply.get("ok"):
            raise WorkerFailure(f"{cmd} failed", str(reply.get("error", "")) + "\n" + str(reply.get("traceback", "")))
        if reply.get("shape") != expected:
            raise CheckFailed(
                "logits_shape",
                {
                    "request": cmd,
                    "logits_shape": reply.get("shape"),
                    "expected": expected,
                    "source_vocab": self.vocab_size,
                },
            )
        return self._buffer.read(self._requests, expected)

    def prefill(self, rows: list[np.ndarray], max_new_tokens: int) -> torch.Tensor:
        """A new batch of ``rows``: the logits of each row's last position, ``(rows, vocab)``."""
        ids = [np.asarray(row).tolist() for row in rows]
        return self._logits("prefill", [len(ids), int(self.vocab_size)], rows=ids, max_new_tokens=int(max_new_tokens))

    def step(self, tokens: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        """``rows`` of the batch, each one ``tokens`` longer: their logits at the new position."""
        rows = np.asarray(rows).tolist()
        return self._logits("step", [len(rows), int(self.vocab_size)], tokens=np.asarray(tokens).tolist(), rows=rows)

    def score(self, ids: np.ndarray, n_last: int) -> torch.Tensor:
        """One-pass teacher-forced logits ``(sequences, n_last, vocab)`` (the pipeline's own runtimes only)."""
        ids = np.asarray(ids)
        return self._logits(
            "score", [len(ids), int(n_last), int(self.vocab_size)], ids=ids.tolist(), n_last=int(n_last)
        )

    def release(self) -> dict:
        return self.request("release")

    def access(self) -> dict:
        return self.request("access")

    # -- measurements from outside -----------------------------------------------------------------------
    def memory(self) -> meter.MemoryUse:
        """Memory of the sandbox now: its cgroup's charge and mapped package files, or what /proc shows; the
        logits buffer wiped first, so nothing parked there is missed."""
        self.wait_started()
        self._buffer.wipe()
        return meter.measure(
            self.box.pids(),
            list(self.policy.read_only),
            self.box.writable_dirs(),
            mounted_roots=self.box.mounted_dirs(),
            cgroup=self.box.cgroup,
        )

    def device_memory(self) -> int | None:
        """On CUDA: the device memory NVML reports for the sandbox's processes (None elsewhere, or where the
        driver withholds per-process figures)."""
        if not self.device.startswith("cuda"):
            return None
        from infbench.gpu_memory import device_bytes

        return device_bytes(set(self.box.pids()))

    def peaks(self) -> dict[str, int]:
        return dict(self.sampler.peaks)


class EmptyWorkers:
    """The memory of empty workers (a runtime's modules preloaded, no package): what a package's ``S_res`` is
    measured against (:mod:`infbench.compression.storage`), kept by the settings of the worker each stands
    beside. A measurement makes its own by default, so its empty worker runs beside the package's; a caller
    verifying several packages in one process can keep one for all of them, and then each runtime's empty worker
    is measured once."""

    def __init__(self) -> None:
        self._measured: dict[tuple, tuple[meter.MemoryUse, int | None]] = {}

    def memory(
        self,
        *,
        sandbox: SandboxSettings,
        preload: list[str],
        device: str,
        threads: int,
        warm_up: SourceShapes | None,
        launch: WorkerLaunch = DEFAULT_LAUNCH,
        **process,
    ) -> tuple[meter.MemoryUse, int | None]:
        """Host memory and (on CUDA) device memory of an empty worker with these settings; ``process``: the
        rest of :class:`SubmissionProcess`'s arguments (its log, deadline, vocabulary), which it does not hold."""
        key = (
            sandbox.model_dump_json(),
            tuple(preload),
            device,
            threads,
            warm_up and warm_up.model_dump_json(),
            launch.model_dump_json(),
        )
        if key not in self._measured:
            with SubmissionProcess(
                None,
                baseline=True,
                sandbox=sandbox,
                preload=preload,
                device=device,
                threads=threads,
                warm_up=warm_up,
                launch=launch,
                **process,
            ) as empty:
                self._measured[key] = empty.memory(), empty.device_memory()
        return self._measured[key]
