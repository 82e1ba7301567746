"""Logits from a worker process to the pipeline: the shared buffer beside the former pipe.

A child process holds logits of ``(rows, vocab)`` in a dtype on a device (random values, made once there), as a
package's model produces them, and answers requests for them, one at a time, as the package worker does:

- ``shared`` (:mod:`infbench.compression.harness.transport`, today's path): the child writes the frame into the
  memfd the parent created, in the model's dtype (from a GPU straight into the mapping), then answers on its
  control pipe; the parent checks the header and copies the values out;
- ``pipe`` (the path before it): the child converts the logits to float32 on the host and writes a header and
  the values to a pipe of their own; the parent reads exactly that many bytes into an array it allocated.

Per request the parent measures the wall time from sending the request to the logits in its hands, and to the
log-probs of one token per row computed from them (:func:`infbench.compression.scoring.target_log_probs`), as the
likelihood harness does at every step. ``infbench bench-transport`` prints the table (docs/gpu.md, docs/sandbox.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import torch

from infbench import atomic
from infbench.compression.harness.transport import LogitsBuffer, frame_bytes
from infbench.compression.scoring import target_log_probs

PIPE_HEADER = struct.Struct("<8sQ4sQQQ")  # the former pipe's frame: marker, request, b"<f4\0", 3 dimensions


def _child(args: argparse.Namespace) -> None:
    from infbench.compression.harness.transport import FrameWriter

    torch.manual_seed(0)
    logits = torch.randn(args.rows, args.vocab, device=args.device).to(getattr(torch, args.dtype))
    writer = FrameWriter(args.fd) if args.transport == "shared" else None
    control = os.fdopen(1, "w", buffering=1)
    for n, _ in enumerate(sys.stdin, start=1):
        if writer is not None:
            writer.write(n, logits)
        else:
            values = logits.float().cpu().numpy()
            data = PIPE_HEADER.pack(b"IBLOGIT1", n, b"<f4\x00", args.rows, args.vocab, 0) + values.tobytes()
            view = memoryview(data)
            while view:
                view = view[os.write(args.fd, view) :]
        control.write("ok\n")


def _read_pipe(fd: int, rows: int, vocab: int) -> torch.Tensor:
    header = bytearray(PIPE_HEADER.size)
    _fill(fd, memoryview(header))
    values = np.empty((rows, vocab), dtype="<f4")
    _fill(fd, memoryview(values).cast("B"))
    return torch.from_numpy(values)


def _fill(fd: int, view: memoryview) -> None:
    got = 0
    while got < len(view):
        got += os.readv(fd, [view[got:]])


def measure(transport: str, *, device: str, rows: int, vocab: int, dtype: str, requests: int) -> dict:
    """Median seconds per request over ``requests`` (after one untimed), for one transport."""
    target = torch.zeros(rows, 1, dtype=torch.long)
    if transport == "shared":
        buffer = LogitsBuffer(frame_bytes((rows, vocab), dtype))
        fd, keep = buffer.fd, buffer.fd
    else:
        read_end, fd = os.pipe()
        keep = fd
    child = subprocess.Popen(
        [sys.executable, "-m", "infbench.perf.logits_transport", "--child", transport, "--fd", str(fd)]
        + ["--device", device, "--rows", str(rows), "--vocab", str(vocab), "--dtype", dtype],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        pass_fds=(keep,),
        text=True,
        bufsize=1,
    )
    if transport == "pipe":
        os.close(fd)
    received, scored = [], []
    try:
        for n in range(1, requests + 2):
            start = time.perf_counter()
            child.stdin.write("go\n")
            child.stdin.flush()
            if transport == "pipe":
                logits = _read_pipe(read_end, rows, vocab)
            if child.stdout.readline() != "ok\n":
                raise RuntimeError(f"the {transport} child stopped answering")
            if transport == "shared":
                logits = buffer.read(n, [rows, vocab])
            got = time.perf_counter()
            target_log_probs(logits[:, None], target)
            done = time.perf_counter()
            if n > 1:
                received.append(got - start)
                scored.append(done - start)
    finally:
        child.stdin.close()
        child.wait()
        if transport == "shared":
            buffer.close()
        else:
            os.close(read_end)
    nbytes = rows * vocab * (4 if transport == "pipe" else torch.empty((), dtype=getattr(torch, dtype)).element_size())
    median = statistics.median(received)
    return {
        "transport": transport,
        "device": device,
        "rows": rows,
        "vocab": vocab,
        "model_dtype": dtype,
        "mb_per_answer": round(nbytes / 1e6, 1),
        "received_ms": round(1e3 * median, 2),
        "with_logprobs_ms": round(1e3 * statistics.median(scored), 2),
        "gb_per_s": round(nbytes / median / 1e9, 2),
    }


def run(*, device: str, shapes: list[tuple[int, int]], dtype: str, requests: int, out: str | None) -> str:
    rows = [
        measure(transport, device=device, rows=r, vocab=v, dtype=dtype, requests=requests)
        for r, v in shapes
        for transport in ("pipe", "shared")
    ]
    table = pd.DataFrame(rows).to_markdown(index=False)
    if out:
        atomic.write_text(out, table + "\n")
    return table


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m infbench.perf.logits_transport")
    p.add_argument("--child", choices=["shared", "pipe"], dest="transport", required=True)
    p.add_argument("--fd", type=int, required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--rows", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--dtype", default="float32")
    return p.parse_args(argv)


if __name__ == "__main__":
    _child(_parse(sys.argv[1:]))
