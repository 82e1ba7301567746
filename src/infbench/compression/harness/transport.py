"""Logits from the package worker to the pipeline, through a shared-memory buffer the pipeline owns.

The pipeline creates an anonymous file (``memfd_create``), maps it read-only and passes the descriptor to the
sandboxed worker (``--logits-fd``), which maps it read-write. Each answer to a ``prefill``, ``step`` or ``score``
request is one frame at the start of the buffer, all little-endian::

    b"IBLOGIT2" | request number (u64) | dtype (4 bytes: b"<f4\\0", b"<f2\\0", b"bf16") | 3 dimensions (u64)
    ... padding to 64 bytes ... | the values, C order

in the dtype the model produced (float32, float16 or bfloat16: a BF16 model's logits cross as BF16, half the
bytes of a float32 copy). The worker writes the frame, then answers its request on the control pipe; the pipeline
then reads the header and requires it to name exactly the request and the shape it asked for (sequences, the
source's vocabulary, positions), and **copies** the values out before computing anything from them: a package
that rewrites the buffer while the pipeline reads cannot make two reads of one value disagree (a log-sum-exp
over small logits and a target read after it was raised). Anything else is
:class:`~infbench.checks.CheckFailed` ``logits_transport`` with what was wrong.

The file's size is sealed (``F_SEAL_SHRINK``, ``F_SEAL_GROW``): the worker can neither grow it into storage nor
shrink it under the pipeline's mapping (a read past its end would kill the pipeline with ``SIGBUS``).

Memory: the worker's writes fault the buffer's pages into its own memory cgroup (workspace of a request, inside
its hard limit). The pipeline **wipes** the buffer (punches a hole over all of it, which frees every page,
whoever faulted it) before every memory measurement (:meth:`LogitsBuffer.wipe`), so whatever a package parks
there between requests is gone before it could be counted or missed: the buffer holds no model storage outside
``S_res``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import mmap
import os
import struct

import numpy as np

from infbench.checks import CheckFailed

HEADER = struct.Struct("<8sQ4sQQQ")
MAGIC = b"IBLOGIT2"
VALUES_AT = 64  # the values start here (aligned)
DTYPES = {b"<f4\x00": "float32", b"<f2\x00": "float16", b"bf16": "bfloat16"}  # code: torch dtype
CODES = {name: code for code, name in DTYPES.items()}
SIZES = {"float32": 4, "float16": 2, "bfloat16": 2}
_PUNCH_HOLE = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)


def frame_bytes(shape: tuple[int, ...], dtype: str = "float32") -> int:
    """Bytes of a frame of ``shape`` in ``dtype``, header included."""
    return VALUES_AT + int(np.prod(shape)) * SIZES[dtype]


class LogitsBuffer:
    """The pipeline's side: the anonymous file of ``capacity`` bytes (a frame of the largest request in float32),
    its descriptor for the worker (:attr:`fd`) and a read-only mapping."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        # no MFD_CLOEXEC: the worker inherits it (pass_fds)
        self.fd = os.memfd_create("infbench-logits", os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, self.capacity)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.map = mmap.mmap(self.fd, self.capacity, mmap.MAP_SHARED, mmap.PROT_READ)

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)

    def wipe(self) -> None:
        """Drop every page of the buffer (whoever faulted it): nothing written there survives."""
        if _libc.fallocate(self.fd, _PUNCH_HOLE, 0, self.capacity) != 0:
            raise OSError(ctypes.get_errno(), "cannot wipe the logits buffer")

    def _reject(self, request: int, shape: list[int], problem: str, detail: str):
        raise CheckFailed(
            "logits_transport", {"problem": problem, "detail": detail, "request": request, "expected_shape": shape}
        )

    def read(self, request: int, shape: list[int]):
        """The answer to ``request``: a private copy of exactly ``shape`` values in the dtype the frame names,
        or ``logits_transport``."""
        magic, number, code, *dims = HEADER.unpack_from(self.map, 0)
        if magic != MAGIC:
            self._reject(request, shape, "marker", f"the frame starts {magic!r}, not {MAGIC!r}")
        if number != request:
            self._reject(request, shape, "request", f"the frame answers request {number}, not {request}")
        if code not in DTYPES:
            self._reject(request, shape, "dtype", f"the frame holds {code!r}: not float32, float16 or bfloat16")
        padded = list(shape) + [0] * (3 - len(shape))
        if dims != padded:
            self._reject(request, shape, "shape", f"the frame holds {dims}, the request asked for {padded}")
        import torch

        dtype = DTYPES[code]
        nbytes = int(np.prod(shape)) * SIZES[dtype]
        if VALUES_AT + nbytes > self.capacity:
            self._reject(request, shape, "size", f"{nbytes} bytes of values do not fit the {self.capacity}-byte buffer")
        raw = np.frombuffer(self.map, dtype=np.uint8, count=nbytes, offset=VALUES_AT)
        values = torch.from_numpy(raw.copy())  # one read of every byte: the pipeline's own copy
        return values.view(getattr(torch, dtype)).reshape(shape)


class FrameWriter:
    """The worker's side: the buffer mapped read-write. Needs torch only for a tensor's logits (a package that
    returns tensors has imported it already); NumPy arrays go as they are."""

    def __init__(self, fd: int):
        size = os.fstat(fd).st_size
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def write(self, request: int, logits) -> list[int]:
        """``logits`` (a tensor on any device, or an array) as one frame, in its own dtype where the transport
        has it (float32, float16, bfloat16), else in float32; its shape."""
        if isinstance(logits, np.ndarray) or not hasattr(logits, "detach"):
            values = np.asarray(logits)
            if values.dtype not in (np.float32, np.float16):
                values = values.astype(np.float32)
            code = b"<f4\x00" if values.dtype == np.float32 else b"<f2\x00"
            nbytes = self._fits(values.shape, values.nbytes)
            np.frombuffer(self.map, dtype=values.dtype, count=values.size, offset=VALUES_AT).reshape(values.shape)[
                ...
            ] = values
        else:
            import torch

            values = logits.detach()
            name = str(values.dtype).removeprefix("torch.")
            if name not in CODES:
                values, name = values.float(), "float32"
            code = CODES[name]
            nbytes = self._fits(tuple(values.shape), values.numel() * values.element_size())
            target = torch.frombuffer(self.map, dtype=torch.uint8, count=nbytes, offset=VALUES_AT)
            target.view(values.dtype).view(values.shape).copy_(values)
        shape = list(values.shape)
        HEADER.pack_into(self.map, 0, MAGIC, request, code, *shape, *[0] * (3 - len(shape)))
        return shape

    def _fits(self, shape: tuple[int, ...], nbytes: int) -> int:
        if len(shape) not in (2, 3):
            raise ValueError(f"logits must have 2 or 3 dimensions: {shape}")
        if VALUES_AT + nbytes > len(self.map):
            raise ValueError(f"{nbytes} bytes of logits do not fit the {len(self.map)}-byte buffer")
        return nbytes
