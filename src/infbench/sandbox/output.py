"""A sandboxed process's output: a pipe the parent copies into a log, never the log file itself.

Handing a sandbox the host's log file as its fd 1 or 2 would let it seek, truncate or rewrite the log (and
whatever the pipeline wrote there). Instead it writes into a pipe and a thread of the parent appends what
arrives to the log (opened once by the caller, in append mode), up to :data:`LOG_LIMIT_BYTES`; the rest is
read and dropped, so a flood neither blocks the sandbox nor fills the disk. The last bytes are kept for error
messages (:meth:`LogCopier.tail`).
"""

from __future__ import annotations

import os
import threading
from typing import BinaryIO

LOG_LIMIT_BYTES = 64 << 20
TAIL_BYTES = 16 << 10


class LogCopier:
    """Reads ``read_fd`` (the parent's end of the pipe) until EOF, appending to ``log``."""

    def __init__(self, read_fd: int, log: BinaryIO | None, limit: int = LOG_LIMIT_BYTES):
        self.fd, self.log, self.limit = read_fd, log, limit
        self.copied = self.dropped = 0
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True, name="infbench-log-copier")
        self._thread.start()

    def _run(self) -> None:
        try:
            while chunk := os.read(self.fd, 1 << 16):
                with self._lock:
                    self._tail += chunk
                    del self._tail[:-TAIL_BYTES]
                keep = chunk[: max(0, self.limit - self.copied)]
                if keep and self.log is not None:
                    self.log.write(keep)
                    self.log.flush()
                self.copied += len(keep)
                self.dropped += len(chunk) - len(keep)
        except (OSError, ValueError):
            pass
        finally:
            os.close(self.fd)
            if self.dropped and self.log is not None:
                try:
                    self.log.write(f"\n[infbench: {self.dropped} more bytes of output dropped]\n".encode())
                    self.log.flush()
                except (OSError, ValueError):
                    pass

    def tail(self, n: int = 2000) -> str:
        with self._lock:
            return bytes(self._tail[-n:]).decode(errors="replace")

    def join(self, timeout: float = 5.0) -> None:
        self._thread.join(timeout)
