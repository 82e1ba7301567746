"""The verifier's own limits on what a server streams back (server-sent events).

A server under test is untrusted: a response that never ends a line, or one far longer than what was
asked for, must cost the client neither its memory nor more time than the request's timeout. Every
response body is read through :class:`BoundedLines`, which splits it into lines and fails with
:class:`ResponseTooLarge` once the body exceeds :func:`response_limit` bytes (a line never ended counts
as it grows). The limit is generous to any honest layout: a chunk per token with its text, ids and
the fields vLLM or SGLang add, a first chunk echoing the prompt's ids, and a usage chunk.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

BASE_BYTES = 64 << 10  # headers of the stream, its usage and [DONE] events, an error message
BYTES_PER_PROMPT_TOKEN = 16  # a prompt's ids echoed back (e.g. vLLM's prompt_token_ids), 7 digits and ", "
BYTES_PER_OUTPUT_TOKEN = 4096  # one chunk per token: ~300 bytes of fields, the piece's text JSON-escaped


class ResponseTooLarge(ValueError):
    """The body outgrew :func:`response_limit`."""


class StreamTimeout(ValueError):
    """The stream was still open when the request's time was up."""


def response_limit(prompt_tokens: int, max_tokens: int) -> int:
    """The most bytes a streamed completion of ``max_tokens`` for a prompt of ``prompt_tokens`` may take."""
    return BASE_BYTES + BYTES_PER_PROMPT_TOKEN * prompt_tokens + BYTES_PER_OUTPUT_TOKEN * max_tokens


class BoundedLines:
    """A body's lines as its reads arrive, at most ``limit`` bytes in all (the unfinished line included).

    The lines completed within the limit are handed over first, whatever the size of the read they came in
    (reads coalesce under load): what a stream broke before its size did (too many tokens, say) is seen in
    the order the stream sent it. The next call, :meth:`feed` or :meth:`rest`, fails with
    :class:`ResponseTooLarge`."""

    def __init__(self, limit: int):
        self.limit = limit
        self.received = 0
        self.pending = bytearray()  # the unfinished last line of the reads so far (appended in place)
        self.overflow: str | None = None  # why the body is too large, raised at the next call

    def _check(self) -> None:
        if self.overflow is not None:
            raise ResponseTooLarge(self.overflow)

    def feed(self, data: bytes) -> list[bytes]:
        """The lines ``data`` completes (without their newline) within the limit."""
        self._check()
        allowed = self.limit - self.received
        self.received += len(data)
        if len(data) > allowed:
            self.overflow = (
                f"response larger than {self.limit} bytes (the most a completion of this size "
                f"may take), its unfinished last line {len(self.pending) + len(data)} bytes"
            )
            data = data[: max(allowed, 0)]
            if b"\n" not in data:
                self._check()
        self.pending += data
        if b"\n" not in data:
            return []
        *lines, rest = self.pending.split(b"\n")
        self.pending = rest
        return [bytes(line) for line in lines]

    def rest(self) -> bytes:
        """What followed the last newline (a body may end its last line without one)."""
        self._check()
        return bytes(self.pending)


def text_lines(chunks: Iterable[bytes], limit: int, timeout_s: float) -> Iterator[str]:
    """The decoded lines of a blocking body read as ``chunks`` (``\\r`` stripped), bounded to ``limit`` bytes;
    :class:`StreamTimeout` once ``timeout_s`` has passed since the first call (checked at every read)."""
    deadline = time.monotonic() + timeout_s
    lines = BoundedLines(limit)
    for data in chunks:
        for line in lines.feed(data):
            yield line.decode().rstrip("\r")
        if time.monotonic() > deadline:
            raise StreamTimeout(f"stream still open after {timeout_s} s")
    if lines.rest():
        yield lines.rest().decode().rstrip("\r")
