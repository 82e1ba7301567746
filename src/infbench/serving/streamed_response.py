"""What one streamed completion carried (server-sent events, read within the verifier's limits of
:mod:`infbench.serving.sse`), and its token accounting (:func:`token_accounting`): the arrival rule and the
well-formedness rule of :mod:`infbench.serving.replay`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson

from infbench.serving.endpoints import Completions
from infbench.serving.sse import BoundedLines


class StreamedResponse:
    """What one streamed response carried; a body beyond :func:`~infbench.serving.sse.response_limit` or more
    ids than ``max_tokens`` stop it with an error (the verifier's memory and time stay bounded)."""

    def __init__(
        self,
        max_tokens: int,
        byte_limit: int,
        piece: Callable[[dict[str, Any]], tuple[str, list[int] | None]] = Completions().piece,  # noqa: B008  (stateless)
    ):
        self.piece = piece  # (text, token ids) of one streamed choice, as the endpoint lays it out
        self.max_tokens = max_tokens
        self.lines = BoundedLines(byte_limit)
        self.first_id: float = math.nan  # arrival of the first / last chunk carrying a token id
        self.last_id: float = math.nan
        self.first_text: float = math.nan  # the same for chunks with text (timing of a stream without ids)
        self.last_text: float = math.nan
        self.chunks = 0
        self.id_chunks = 0
        self.text_chunks = 0
        self.text_without_ids = 0
        self.ids: list[int] = []
        self.arrivals: list[float] = []  # of each id, on the replay's clock
        self.text: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.server_ttft: float | None = None
        self.server_receive: float | None = None

    def receive(self, data: bytes, now: float) -> None:
        """One network read, split into lines here rather than a readline per line (a third of the
        client's CPU); every event of a read arrived at the same moment and is stamped once."""
        for line in self.lines.feed(data):
            self.line(line, now)

    def end(self, now: float) -> None:
        """The body ended: its last line may lack a newline."""
        self.line(self.lines.rest(), now)

    def line(self, raw: bytes, now: float) -> None:
        """One SSE line: ``data: <json>`` or ``data: [DONE]``; blank lines and comments are skipped."""
        line = raw.decode().rstrip("\r")
        if not line or line.startswith(":"):
            return
        if self.done or not line.startswith("data:"):
            raise ValueError(f"malformed SSE line{' after [DONE]' * self.done}: {line[:200]!r}")
        data = line[5:].strip()
        if data == "[DONE]":
            self.done = True
        else:
            self.feed(orjson.loads(data), now)

    def feed(self, payload: dict[str, Any], now: float) -> None:
        if payload.get("usage"):
            self.usage = payload["usage"]
        if "server_receive_time" in payload and self.server_ttft is None:
            self.server_receive = float(payload["server_receive_time"])
            self.server_ttft = float(payload["server_first_token_time"]) - self.server_receive
        choices = payload.get("choices")
        if choices is None:
            if not payload.get("usage"):
                raise ValueError(f"chunk without choices or usage: {str(payload)[:200]}")
            return
        for choice in choices:
            text, ids = self.piece(choice)
            text, ids = text or "", ids or []
            if ids:
                self.ids.extend(int(i) for i in ids)
                self.arrivals.extend([now] * len(ids))
                if len(self.ids) > self.max_tokens:
                    raise ValueError(f"more token ids streamed than max_tokens={self.max_tokens}")
                self.id_chunks += 1
                if math.isnan(self.first_id):
                    self.first_id = now
                self.last_id = now
            if text:
                self.text_chunks += 1
                self.text_without_ids += not ids
                if math.isnan(self.first_text):
                    self.first_text = now
                self.last_text = now
            self.chunks += bool(text or ids)
            self.text.append(text)

    @property
    def saw_ids(self) -> bool:
        return self.id_chunks > 0

    @property
    def first(self) -> float:
        """Arrival of the first token: the first id-carrying chunk (the first text chunk without any ids)."""
        return self.first_id if self.saw_ids else self.first_text

    @property
    def last(self) -> float:
        return self.last_id if self.saw_ids else self.last_text


def token_accounting(stream: StreamedResponse, prompt_len: int | None, max_tokens: int) -> tuple[int, str]:
    """(client-accounted output tokens, error or '') of a finished stream; ``prompt_len`` None: the
    server's prompt token count is not compared (a chat prompt the server tokenizes and templates)."""
    if not stream.done:
        return 0, "stream ended without [DONE]"
    usage_out = stream.usage.get("completion_tokens") if stream.usage else None
    if stream.saw_ids and usage_out is not None and usage_out != len(stream.ids):
        return len(stream.ids), f"usage.completion_tokens={usage_out} but {len(stream.ids)} token ids streamed"
    if stream.saw_ids:
        n_out = len(stream.ids)
    elif usage_out is not None:  # without token ids (unverified counts) a text chunk carries at least one token
        n_out = int(usage_out)
        if not 0 < stream.text_chunks <= n_out:
            return n_out, f"usage.completion_tokens={n_out} but {stream.text_chunks} text chunks streamed"
    else:
        return stream.chunks, "no token accounting (neither token_ids nor usage)"
    if prompt_len is not None and stream.usage and stream.usage.get("prompt_tokens") not in (None, prompt_len):
        return n_out, f"usage.prompt_tokens={stream.usage['prompt_tokens']} but the prompt has {prompt_len}"
    if n_out != max_tokens:
        return n_out, f"{n_out} output tokens, {max_tokens} prescribed"
    return n_out, ""
