"""Logits from the package worker to the pipeline, over a pipe of their own (no files, no IPC directory).

The pipeline creates the pipe, keeps the read end and passes the write end to the sandboxed worker
(``--logits-fd``). Each answer to a ``logits`` request is one frame, all little-endian::

    b"IBLOGIT1" | request number (u64) | b"<f4\\0" | 3 dimensions (u64 each) | the values, float32, C order

The pipeline never believes the frame about its size: it knows the shape it asked for (sequences, positions,
the source's vocabulary), requires the header to say exactly that request and that shape, reads exactly that
many bytes into an array it allocated, and checks that nothing follows. Every read waits at most until the
request's deadline. Whatever the worker (or a package that took it over) writes instead, too little, too much,
another dtype, nothing at all, or a closed pipe, is :class:`~infbench.compression.integrity.CheckFailed`
``logits_transport`` with what was wrong; a path that is a symlink, a FIFO or an ``.npz`` has no meaning here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import time

import numpy as np

from infbench.checks import CheckFailed

HEADER = struct.Struct("<8sQ4sQQQ")
MAGIC = b"IBLOGIT1"
DTYPE = b"<f4\x00"
PIPE_BYTES = 1 << 20  # the pipe's buffer where the kernel allows it (fewer, larger reads)


def write(fd: int, request: int, logits: np.ndarray) -> None:
    """The worker's side: one frame (blocks until the pipeline has read it all)."""
    values = np.ascontiguousarray(logits, dtype="<f4")
    if values.ndim != 3:
        raise ValueError(f"logits must have 3 dimensions (sequences, positions, vocabulary): {values.shape}")
    for part in (memoryview(HEADER.pack(MAGIC, request, DTYPE, *values.shape)), memoryview(values).cast("B")):
        while part:
            part = part[os.write(fd, part) :]


class Reader:
    """The pipeline's side: the read end, non-blocking, every read under a deadline."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)

    def _reject(self, request: int, shape: list[int], problem: str, detail: str):
        raise CheckFailed(
            "logits_transport", {"problem": problem, "detail": detail, "request": request, "expected_shape": shape}
        )

    def _fill(self, view: memoryview, deadline: float, request: int, shape: list[int], what: str) -> None:
        got = 0
        while got < len(view):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._reject(
                    request,
                    shape,
                    "timeout",
                    f"{got} of the {len(view)} bytes of the {what} arrived before the deadline",
                )
            if not select.select([self.fd], [], [], remaining)[0]:
                continue
            try:
                n = os.readv(self.fd, [view[got:]])
            except BlockingIOError:
                continue
            if n == 0:
                self._reject(
                    request,
                    shape,
                    "closed",
                    f"the worker closed the pipe after {got} of the {len(view)} bytes of the {what}",
                )
            got += n

    def _trailing(self) -> bool:
        if not select.select([self.fd], [], [], 0)[0]:
            return False
        try:
            return os.read(self.fd, 1) != b""  # b"": the worker closed the pipe, nothing follows
        except BlockingIOError:
            return False

    def read(self, request: int, shape: list[int], deadline: float) -> np.ndarray:
        """The answer to ``request``: exactly ``shape`` float32 values, or ``logits_transport``."""
        header = bytearray(HEADER.size)
        self._fill(memoryview(header), deadline, request, shape, "frame header")
        magic, number, dtype, *dims = HEADER.unpack(header)
        if magic != MAGIC:
            self._reject(request, shape, "marker", f"the frame starts {bytes(header[:8])!r}, not {MAGIC!r}")
        if number != request:
            self._reject(request, shape, "request", f"the frame answers request {number}, not {request}")
        if dtype != DTYPE:
            self._reject(request, shape, "dtype", f"the frame holds {dtype!r}, not little-endian float32")
        if dims != shape:
            self._reject(request, shape, "shape", f"the frame holds {dims}, the request asked for {shape}")
        values = np.empty(shape, dtype="<f4")
        self._fill(memoryview(values).cast("B"), deadline, request, shape, "values")
        if self._trailing():
            self._reject(request, shape, "trailing", "bytes follow the frame")
        return values
