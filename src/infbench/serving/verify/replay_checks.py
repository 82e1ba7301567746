"""Checks on every timed request of the held-out replays (PROTOCOL B5).

A request is *answered* when the server streamed a whole, well-formed response to it (not cut by the
client's timeout or the end of the replay, no transport failure). On answered requests:

- ``complete_prompts``: ``usage.prompt_tokens`` is reported and equals the prompt tokens sent;
- ``exact_output_lengths``: exactly ``max_tokens`` tokens by the client's count and by usage;
- ``streaming_consistency``: streamed token ids, usage and the client's count agree, and the streamed
  text is the detokenized token ids (compared without whitespace, special-token strings and U+FFFD,
  which engines render differently);
- ``session_progress``: how many sessions and requests completed; fails when no request completed
  or any request failed at the transport level (connection dropped, HTTP error, malformed or
  unterminated stream: a crash or a broken server), or when the server stalled (requests timed out
  and none sent after the first timeout completed). Occasional timeouts are counted, not failed.

Malformed or short responses are already failed requests in the records (:mod:`..replay`); these
checks make the failure a verification failure and name it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pandas as pd

from infbench.serving.verify.common import CheckResult

CUT = ("timed out", "cancelled at replay end")
ACCOUNTING = re.compile(r"^(usage\.|no token accounting|[0-9]+ output tokens, [0-9]+ prescribed)")


def _accounting(error: str) -> bool:
    return bool(ACCOUNTING.match(error))


def _answered(frame: pd.DataFrame) -> pd.DataFrame:
    """Requests the server answered in full: well-formed, or well-formed but with wrong accounting."""
    return frame[frame["error"].map(lambda e: not e or _accounting(e))]


def _transport(error: str) -> bool:
    return bool(error) and not error.startswith(CUT) and not _accounting(error)


def _examples(rows: pd.DataFrame, what: Callable[[pd.Series], str], n: int = 5) -> list[str]:
    return [f"{r.session_id}#{r.instance}/{r.request_id}: {what(r)}" for r in rows.head(n).itertuples()]


def complete_prompts(frame: pd.DataFrame) -> CheckResult:
    ans = _answered(frame)
    bad = ans[ans["usage_prompt_tokens"].isna() | (ans["usage_prompt_tokens"] != ans["input_tokens"])]
    return CheckResult(
        name="complete_prompts", passed=bad.empty,
        summary=(f"{len(ans)} answered requests reported their full prompts" if bad.empty else
                 f"{len(bad)} of {len(ans)} answered requests reported another prompt length than sent"),
        evidence={"answered": len(ans), "mismatched": len(bad),
                  "examples": _examples(bad, lambda r: f"sent {r.input_tokens}, usage.prompt_tokens="
                                                       f"{r.usage_prompt_tokens}")})


def exact_output_lengths(frame: pd.DataFrame) -> CheckResult:
    ans = _answered(frame)
    bad = ans[(ans["output_tokens"] != ans["max_tokens"]) | ans["usage_completion_tokens"].isna()
              | (ans["usage_completion_tokens"] != ans["max_tokens"])]
    return CheckResult(
        name="exact_output_lengths", passed=bad.empty,
        summary=(f"{len(ans)} answered requests gave exactly their prescribed output" if bad.empty else
                 f"{len(bad)} of {len(ans)} answered requests gave another output length than prescribed"),
        evidence={"answered": len(ans), "wrong_length": len(bad),
                  "examples": _examples(bad, lambda r: f"prescribed {r.max_tokens}, streamed {r.output_tokens}, "
                                                       f"usage {r.usage_completion_tokens}")})


def normalize_text(text: str, special: list[str]) -> str:
    for s in special:
        if s:
            text = text.replace(s, "")
    return re.sub(r"\s+", "", text.replace("\ufffd", ""))


def streaming_consistency(frame: pd.DataFrame, decode: Callable[[list[int]], str] | None,
                          special: list[str]) -> CheckResult:
    ans = _answered(frame)
    problems = []
    for r in ans.itertuples():
        ids = list(r.streamed_token_ids)
        if len(ids) != r.output_tokens or (r.usage_completion_tokens is not None
                                           and r.usage_completion_tokens == r.usage_completion_tokens
                                           and int(r.usage_completion_tokens) != len(ids)):
            problems.append((r, f"{len(ids)} token ids, client count {r.output_tokens}, "
                                f"usage {r.usage_completion_tokens}"))
        elif decode is not None and normalize_text(decode(ids), special) != normalize_text(r.text, special):
            problems.append((r, f"streamed text {r.text[:60]!r} is not the token ids' text "
                                f"{decode(ids)[:60]!r}"))
    return CheckResult(
        name="streaming_consistency", passed=not problems,
        summary=(f"{len(ans)} answered requests: token ids, text and usage agree" if not problems else
                 f"{len(problems)} of {len(ans)} answered requests: stream inconsistent, e.g. {problems[0][1]}"),
        evidence={"answered": len(ans), "inconsistent": len(problems),
                  "examples": [f"{r.session_id}#{r.instance}/{r.request_id}: {p}" for r, p in problems[:5]]})


def session_progress(frame: pd.DataFrame, issue_end: float | None = None) -> CheckResult:
    win = frame[frame["in_window"]]
    completed = frame["ok"]
    by_instance = frame.groupby("instance").agg(ok=("ok", "sum"), size=("instance_requests", "first"))
    sessions_done = int((by_instance["ok"] == by_instance["size"]).sum())
    transport = frame[frame["error"].map(_transport)]
    timeouts = frame[frame["error"].str.startswith("timed out")]
    evidence = {"requests": len(frame), "requests_in_window": len(win), "completed": int(completed.sum()),
                "completed_in_window": int(win["ok"].sum()), "sessions_started": len(by_instance),
                "sessions_completed": sessions_done, "timeouts": len(timeouts), "transport_failures": len(transport),
                "examples": _examples(transport, lambda r: r.error)}
    if frame.empty or not completed.any():
        return CheckResult(name="session_progress", passed=False, evidence=evidence,
                           summary=f"no request completed ({len(frame)} sent)"
                           + (f"; e.g. {transport['error'].iloc[0]}" if len(transport) else ""))
    if len(timeouts):
        # stalled: a request timed out while the replay was still sending, and nothing sent after it completed
        first = timeouts["end_time"].min()
        after = frame[(frame["send_time"] >= first) & frame["ok"]]
        evidence["completed_after_first_timeout"] = len(after)
        if (issue_end is None or first < issue_end) and after.empty:
            return CheckResult(name="session_progress", passed=False, evidence=evidence,
                               summary=f"stalled: {len(timeouts)} request(s) timed out and no request sent after the "
                                       f"first timeout completed ({int(completed.sum())} completed before)")
    if len(transport):
        return CheckResult(name="session_progress", passed=False, evidence=evidence,
                           summary=f"{len(transport)} request(s) failed in transport, e.g. "
                                   f"{transport['error'].iloc[0][:200]}")
    return CheckResult(name="session_progress", passed=True, evidence=evidence,
                       summary=f"{int(completed.sum())} requests and {sessions_done} of {len(by_instance)} sessions "
                               f"completed, {len(timeouts)} timed out")
