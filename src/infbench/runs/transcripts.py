"""Coding-agent session transcripts: token usage, tool calls and timestamps per message.

- ``transcripts/claude-code/*.jsonl``: Claude Code session files. ``type: assistant``
  lines carry ``timestamp``, ``message.id``, ``message.model``, ``message.usage``
  (``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``,
  ``output_tokens``; disjoint counts) and ``message.content`` blocks (``tool_use``
  with a ``name``). One API message may be split over several lines with the same
  ``message.id``: it is counted once (its last line's usage); messages with no
  tokens at all (Claude Code's ``<synthetic>`` ones) are skipped.
- ``transcripts/codex/*.jsonl``: Codex rollout files. ``turn_context`` payloads name
  the ``model``; ``event_msg`` payloads of ``type: token_count`` carry
  ``info.last_token_usage`` (or only the cumulative ``info.total_token_usage``, then
  the difference to the previous total is used; a repeat of the previous totals is
  skipped) with ``input_tokens`` (cached ones
  included), ``cached_input_tokens``, ``output_tokens`` (reasoning included);
  ``response_item`` payloads of ``type: function_call`` / ``custom_tool_call`` /
  ``local_shell_call`` are tool calls.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from infbench.runs.jsonl import RunError, check_order, objects
from infbench.runs.schema import TokenUsage, ToolCall

FORMATS = ("claude-code", "codex")
CLAUDE_COUNTS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
CODEX_TOOL_ITEMS = ("function_call", "custom_tool_call", "local_shell_call")


def _time(path: Path, line: int, obj: dict) -> datetime:
    stamp = obj.get("timestamp")
    try:
        value = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        raise RunError(path, f"'timestamp' is {stamp!r}, not an ISO 8601 time", line) from None
    if value.tzinfo is None:
        raise RunError(path, f"'timestamp' {stamp!r} has no UTC offset", line)
    return value


def _count(path: Path, line: int, usage: dict, key: str) -> int:
    value = usage.get(key, 0) or 0
    if not isinstance(value, int) or value < 0:
        raise RunError(path, f"usage field '{key}' is {value!r}, not a token count", line)
    return value


def claude_code(path: Path) -> list[TokenUsage | ToolCall]:
    usage_by_message: dict[str, TokenUsage] = {}
    tools: list[ToolCall] = []
    times = []
    for line, obj in objects(path):
        if obj.get("type") != "assistant":
            continue
        message = obj.get("message")
        if not isinstance(message, dict):
            raise RunError(path, "an assistant line needs a 'message' object", line)
        time = _time(path, line, obj)
        times.append((line, time))
        usage = message.get("usage")
        if isinstance(usage, dict) and any(usage.get(k) for k in CLAUDE_COUNTS):  # not a synthetic message
            key = str(message.get("id") or f"line-{line}")
            first = usage_by_message.get(key)
            usage_by_message[key] = TokenUsage(
                time=first.time if first else time,
                model=str(message.get("model", "unknown")),
                input=_count(path, line, usage, "input_tokens"),
                cache_write=_count(path, line, usage, "cache_creation_input_tokens"),
                cached=_count(path, line, usage, "cache_read_input_tokens"),
                output=_count(path, line, usage, "output_tokens"),
            )
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                tools.append(ToolCall(time=time, name=str(block.get("name", "unknown"))))
    check_order(path, times)
    return [*usage_by_message.values(), *tools]


def codex(path: Path) -> list[TokenUsage | ToolCall]:
    model = "unknown"
    found: list[TokenUsage | ToolCall] = []
    previous_total: dict[str, Any] | None = None
    times = []
    for line, obj in objects(path):
        kind, payload = obj.get("type"), obj.get("payload")
        if kind not in ("turn_context", "event_msg", "response_item"):
            continue
        if not isinstance(payload, dict):
            raise RunError(path, f"a '{kind}' line needs a 'payload' object", line)
        time = _time(path, line, obj)
        times.append((line, time))
        if kind == "turn_context":
            model = str(payload.get("model") or model)
        elif kind == "response_item" and payload.get("type") in CODEX_TOOL_ITEMS:
            found.append(ToolCall(time=time, name=str(payload.get("name") or payload["type"])))
        elif kind == "event_msg" and payload.get("type") == "token_count" and payload.get("info"):
            info = payload["info"]
            last, total = info.get("last_token_usage"), info.get("total_token_usage")
            if total is not None and total == previous_total:
                continue  # the same totals again (a rate-limit update): no new model call
            if last is None and total is None:
                raise RunError(path, "token_count info has neither last_token_usage nor total_token_usage", line)
            if last is None:
                last = {
                    k: _count(path, line, total, k) - (previous_total or {}).get(k, 0)
                    for k in ("input_tokens", "cached_input_tokens", "output_tokens")
                }
            previous_total = total or previous_total
            inputs, cached = _count(path, line, last, "input_tokens"), _count(path, line, last, "cached_input_tokens")
            if cached > inputs:
                raise RunError(path, f"cached_input_tokens {cached} exceed input_tokens {inputs}", line)
            found.append(
                TokenUsage(
                    time=time,
                    model=model,
                    input=inputs - cached,
                    cached=cached,
                    output=_count(path, line, last, "output_tokens"),
                )
            )
    check_order(path, times)
    return found


def events(transcripts_dir: Path) -> list[TokenUsage | ToolCall]:
    """Every transcript under ``transcripts/<format>/*.jsonl``."""
    found: list[TokenUsage | ToolCall] = []
    for folder in sorted(p for p in transcripts_dir.iterdir() if not p.name.startswith(".")):
        if not folder.is_dir() or folder.name not in FORMATS:
            raise RunError(folder, f"transcripts go in transcripts/<format>/, format one of {', '.join(FORMATS)}")
        read = claude_code if folder.name == "claude-code" else codex
        for path in sorted(folder.glob("*.jsonl")):
            found.extend(read(path))
    return found
