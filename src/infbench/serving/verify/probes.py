"""Probes sent to a running submission over HTTP (PROTOCOL B5): context probes and EOS probes.

- Context probes: token-id prompts of ``context_limit - out - j`` tokens (j = 0, 1, ...), filler ids
  drawn with a seed derived from the operator's secret (so a server cannot recognise them), EOS ignored,
  ``out`` tokens each; each must complete with ``usage.prompt_tokens`` equal to the prompt sent and
  exactly ``out`` tokens streamed and reported. Their continuations are always fidelity suspects, so
  a server that truncates long prompts but reports their full length is still caught.
- EOS probes: prompts from the reference model (:mod:`.reference`) after which its greedy decoding
  reaches EOS within a few tokens; sent greedily with EOS stopping on. Each must stop at EOS: either
  the EOS id is the last streamed token, or (a server that does not stream the EOS token) it finished
  with ``finish_reason: stop`` right where the reference stops. Nothing may be streamed after an EOS.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
from pydantic import BaseModel

from infbench.checks import Check
from infbench.operator_secret import OperatorSecret
from infbench.serving import sse


class Completion(BaseModel):
    prompt_tokens: int
    ok: bool
    error: str = ""
    ids: list[int] = []
    text: str = ""
    text_chunks_without_ids: int = 0
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    stopped_by_client: bool = False


def complete(
    base_url: str,
    model: str,
    prompt: list[int],
    max_tokens: int,
    *,
    ignore_eos: bool,
    timeout_s: float,
    request_fields: dict[str, Any] | None = None,
    stop: list[str] | None = None,
) -> Completion:
    """One greedy streamed completion; with ``stop`` the client closes the stream once the text contains one."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": ignore_eos,
        "stream_options": {"include_usage": True},
        **(request_fields or {}),
    }
    c = Completion(prompt_tokens=len(prompt), ok=False)
    text: list[str] = []
    try:
        with httpx.stream("POST", base_url + "/v1/completions", json=body, timeout=timeout_s) as resp:
            if resp.status_code != 200:
                detail = next(resp.iter_bytes(300), b"")  # the start of the body only
                c.error = f"HTTP {resp.status_code}: {detail.decode(errors='replace')}"
                return c
            # bounded: a line never ended or a body beyond the size of max_tokens fails, as does a stream
            # still open after timeout_s (checked at every read)
            limit = sse.response_limit(len(prompt), max_tokens)
            for line in sse.text_lines(resp.iter_bytes(), limit, timeout_s):
                if not line or line.startswith(":"):
                    continue
                if not line.startswith("data:"):
                    raise ValueError(f"malformed SSE line: {line[:200]!r}")
                data = line[5:].strip()
                if data == "[DONE]":
                    c.done = True
                    break
                payload = json.loads(data)
                if payload.get("usage"):
                    c.usage_prompt_tokens = payload["usage"].get("prompt_tokens")
                    c.usage_completion_tokens = payload["usage"].get("completion_tokens")
                for choice in payload.get("choices") or []:
                    ids = choice.get("token_ids") or []
                    c.ids.extend(int(i) for i in ids)
                    text.append(choice.get("text") or "")
                    c.text_chunks_without_ids += bool(text[-1]) and not ids
                    if choice.get("finish_reason"):
                        c.finish_reason = choice["finish_reason"]
                if stop and any(s in "".join(text) for s in stop):
                    c.stopped_by_client = True
                    break
    except (httpx.HTTPError, ValueError, TypeError, KeyError, AttributeError) as exc:
        c.error = f"{type(exc).__name__}: {exc}"[:500]
    c.text = "".join(text)
    c.ok = not c.error and (c.done or c.stopped_by_client)
    if not c.error and not c.ok:
        c.error = "stream ended without [DONE]"
    return c


def fatal(c: Completion) -> bool:
    """The server is gone or hung: sending more probes would only wait out their timeouts."""
    return any(k in c.error for k in ("Timeout", "ConnectError", "RemoteProtocolError", "ReadError"))


def filler_prompt(n: int, token_range: tuple[int, int], seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return rng.integers(token_range[0], token_range[1], n).tolist()


def context_probes(
    base_url: str,
    model: str,
    context_limit: int,
    n_probes: int,
    out_tokens: int,
    token_range: tuple[int, int],
    timeout_s: float,
    secret: OperatorSecret,
    request_fields: dict[str, Any] | None = None,
) -> tuple[Check, list[tuple[list[int], Completion]]]:
    """The check, and each probe's (prompt, completion) for the fidelity check."""
    probes, failures, completions = [], [], []
    for j in range(n_probes):
        length = context_limit - out_tokens - j
        prompt = filler_prompt(length, token_range, secret.seed("serving.context_probe", j))
        c = complete(
            base_url, model, prompt, out_tokens, ignore_eos=True, timeout_s=timeout_s, request_fields=request_fields
        )
        completions.append((prompt, c))
        problem = c.error or (
            f"{c.text_chunks_without_ids} chunk(s) carried text without token ids" if c.text_chunks_without_ids else ""
        )
        if not problem and c.usage_prompt_tokens != length:
            problem = f"usage.prompt_tokens={c.usage_prompt_tokens} but the prompt has {length} tokens"
        if not problem and not (len(c.ids) == out_tokens == c.usage_completion_tokens):
            problem = (
                f"{len(c.ids)} token ids streamed, usage.completion_tokens={c.usage_completion_tokens}, "
                f"{out_tokens} asked"
            )
        probes.append(
            {
                "prompt_tokens": length,
                "max_tokens": out_tokens,
                "usage_prompt_tokens": c.usage_prompt_tokens,
                "streamed_tokens": len(c.ids),
                "error": problem,
            }
        )
        if problem:
            failures.append(f"probe {j} ({length} prompt tokens): {problem}")
        if fatal(c):
            break
    if n_probes == 0:
        return Check(name="context_probes", passed=True, summary="no context probes configured"), []
    return Check(
        name="context_probes",
        passed=not failures,
        summary=(
            f"{n_probes} probe(s) at the context limit {context_limit} completed with correct prompt accounting"
            if not failures
            else failures[0]
        ),
        evidence={"context_limit": context_limit, "drawn_with": secret.label, "probes": probes},
    ), completions


def eos_probes(
    base_url: str,
    model: str,
    probes: list[dict[str, Any]],
    eos_ids: list[int],
    max_tokens: int,
    timeout_s: float,
    request_fields: dict[str, Any] | None = None,
) -> tuple[Check, list[Completion]]:
    """``probes``: [{"prompt": ids, "expected": greedy ids ending in EOS}] from the reference record."""
    eos = set(eos_ids)
    results, failures, completions = [], [], []
    for j, probe in enumerate(probes):
        c = complete(
            base_url,
            model,
            probe["prompt"],
            max_tokens,
            ignore_eos=False,
            timeout_s=timeout_s,
            request_fields=request_fields,
        )
        completions.append(c)
        at = [i for i, t in enumerate(c.ids) if t in eos]
        problem = c.error or (
            f"{c.text_chunks_without_ids} chunk(s) carried text without token ids" if c.text_chunks_without_ids else ""
        )
        if not problem and at and at[0] != len(c.ids) - 1:
            problem = f"{len(c.ids) - 1 - at[0]} token(s) streamed after the EOS at position {at[0]}"
        elif not problem and not at:
            if c.finish_reason == "stop" and len(c.ids) == len(probe["expected"]) - 1:
                pass  # stopped at EOS without streaming the EOS token itself
            elif len(c.ids) >= max_tokens:
                problem = f"no EOS in {len(c.ids)} tokens (the reference stops after {len(probe['expected'])})"
            else:
                problem = (
                    f"stopped after {len(c.ids)} tokens without EOS (finish_reason {c.finish_reason}); "
                    f"the reference stops after {len(probe['expected'])}"
                )
        if not problem and c.usage_completion_tokens not in (None, len(c.ids)):
            problem = f"usage.completion_tokens={c.usage_completion_tokens} but {len(c.ids)} token ids streamed"
        results.append(
            {
                "prompt_tokens": len(probe["prompt"]),
                "reference": probe["expected"],
                "streamed": c.ids,
                "finish_reason": c.finish_reason,
                "error": problem,
            }
        )
        if problem:
            failures.append(f"EOS probe {j}: {problem}")
        if fatal(c):
            failures.append(f"{len(probes) - j - 1} EOS probe(s) not sent after: {c.error}")
            break
    if not probes:
        return Check(name="natural_stopping", passed=True, summary="no EOS probes configured"), completions
    return Check(
        name="natural_stopping",
        passed=not failures,
        summary=(f"{len(probes)} EOS probe(s) stopped at EOS with nothing after it" if not failures else failures[0]),
        evidence={"eos_token_ids": sorted(eos), "probes": results},
    ), completions
