"""Checks on every timed request of the held-out replays (PROTOCOL B5).

A request is *answered* when the server streamed a whole, well-formed response to it (not cut by the
client's timeout or the end of the replay, no transport failure). On answered requests:

- ``complete_prompts``: ``usage.prompt_tokens`` is reported and equals the prompt tokens sent;
- ``exact_output_lengths``: exactly ``max_tokens`` tokens by the client's count and by usage;
- ``streaming_consistency``: every chunk with text carried the token ids it adds (text without ids
  fails), usage equals the number of streamed ids, and the streamed text is the ids' text as the
  source tokenizer decodes them (:mod:`.source_text` states the two differences allowed). A
  tokenizer that cannot be loaded fails the check with its cause;
- ``session_progress``: how many sessions and requests completed; fails when no request completed
  or any request failed at the transport level (connection dropped, HTTP error, malformed or
  unterminated stream: a crash or a broken server), or when the server stalled (requests timed out
  and none sent after the first timeout completed). Occasional timeouts are counted, not failed.

Malformed or short responses are already failed requests in the records (:mod:`..replay`); these
checks make the failure a verification failure and name it. No check passes by default: with no
answered request there is nothing to vouch for, and each fails saying so.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pandas as pd

from infbench.checks import Check
from infbench.serving.verify.source_text import SourceText

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


def _nothing_answered(name: str, frame: pd.DataFrame) -> Check:
    return Check(
        name=name,
        passed=False,
        summary=f"no answered request to check ({len(frame)} sent)",
        evidence={"answered": 0, "requests": len(frame)},
    )


def complete_prompts(frame: pd.DataFrame) -> Check:
    ans = _answered(frame)
    if ans.empty:
        return _nothing_answered("complete_prompts", frame)
    bad = ans[ans["usage_prompt_tokens"].isna() | (ans["usage_prompt_tokens"] != ans["input_tokens"])]
    return Check(
        name="complete_prompts",
        passed=bad.empty,
        summary=(
            f"{len(ans)} answered requests reported their full prompts"
            if bad.empty
            else f"{len(bad)} of {len(ans)} answered requests reported another prompt length than sent"
        ),
        evidence={
            "answered": len(ans),
            "mismatched": len(bad),
            "examples": _examples(bad, lambda r: f"sent {r.input_tokens}, usage.prompt_tokens={r.usage_prompt_tokens}"),
        },
    )


def exact_output_lengths(frame: pd.DataFrame) -> Check:
    ans = _answered(frame)
    if ans.empty:
        return _nothing_answered("exact_output_lengths", frame)
    bad = ans[
        (ans["output_tokens"] != ans["max_tokens"])
        | ans["usage_completion_tokens"].isna()
        | (ans["usage_completion_tokens"] != ans["max_tokens"])
    ]
    return Check(
        name="exact_output_lengths",
        passed=bad.empty,
        summary=(
            f"{len(ans)} answered requests gave exactly their prescribed output"
            if bad.empty
            else f"{len(bad)} of {len(ans)} answered requests gave another output length than prescribed"
        ),
        evidence={
            "answered": len(ans),
            "wrong_length": len(bad),
            "examples": _examples(
                bad,
                lambda r: f"prescribed {r.max_tokens}, streamed {r.output_tokens}, usage {r.usage_completion_tokens}",
            ),
        },
    )


def stream_problem(r, text: SourceText) -> str | None:
    """Why one answered request's stream is not token-level truth, or None."""
    ids = [int(t) for t in r.streamed_token_ids]
    usage = r.usage_completion_tokens
    if not r.counts_from_token_ids:
        return f"no token ids streamed (usage.completion_tokens={usage}, {r.n_chunks} text chunks)"
    if r.text_chunks_without_ids:
        return f"{r.text_chunks_without_ids} chunk(s) carried text without token ids"
    if usage is None or usage != usage:
        return f"usage.completion_tokens not reported for {len(ids)} streamed token ids"
    if int(usage) != len(ids) or r.output_tokens != len(ids):
        return f"{len(ids)} token ids streamed, client count {r.output_tokens}, usage.completion_tokens={usage}"
    return text.mismatch(ids, r.text)


def streaming_consistency(frame: pd.DataFrame, text: SourceText) -> Check:
    ans = _answered(frame)
    if ans.empty:
        return _nothing_answered("streaming_consistency", frame)
    problems = [(r, p) for r in ans.itertuples() if (p := stream_problem(r, text))]
    return Check(
        name="streaming_consistency",
        passed=not problems,
        summary=(
            f"{len(ans)} answered requests: every token arrived with its id; ids, text and usage agree"
            if not problems
            else f"{len(problems)} of {len(ans)} answered requests: stream inconsistent, e.g. {problems[0][1]}"
        ),
        evidence={
            "answered": len(ans),
            "inconsistent": len(problems),
            "examples": [f"{r.session_id}#{r.instance}/{r.request_id}: {p}" for r, p in problems[:5]],
        },
    )


def session_progress(frame: pd.DataFrame, issue_end: float | None = None) -> Check:
    win = frame[frame["in_window"]]
    completed = frame["ok"]
    by_instance = frame.groupby("instance").agg(ok=("ok", "sum"), size=("instance_requests", "first"))
    sessions_done = int((by_instance["ok"] == by_instance["size"]).sum())
    transport = frame[frame["error"].map(_transport)]
    timeouts = frame[frame["error"].str.startswith("timed out")]
    evidence = {
        "requests": len(frame),
        "requests_in_window": len(win),
        "completed": int(completed.sum()),
        "completed_in_window": int(win["ok"].sum()),
        "sessions_started": len(by_instance),
        "sessions_completed": sessions_done,
        "timeouts": len(timeouts),
        "transport_failures": len(transport),
        "examples": _examples(transport, lambda r: r.error),
    }
    if frame.empty or not completed.any():
        return Check(
            name="session_progress",
            passed=False,
            evidence=evidence,
            summary=f"no request completed ({len(frame)} sent)"
            + (f"; e.g. {transport['error'].iloc[0]}" if len(transport) else ""),
        )
    if len(timeouts):
        # stalled: a request timed out while the replay was still sending, and nothing sent after it completed
        first = timeouts["end_time"].min()
        after = frame[(frame["send_time"] >= first) & frame["ok"]]
        evidence["completed_after_first_timeout"] = len(after)
        if (issue_end is None or first < issue_end) and after.empty:
            return Check(
                name="session_progress",
                passed=False,
                evidence=evidence,
                summary=f"stalled: {len(timeouts)} request(s) timed out and no request sent after the "
                f"first timeout completed ({int(completed.sum())} completed before)",
            )
    if len(transport):
        return Check(
            name="session_progress",
            passed=False,
            evidence=evidence,
            summary=f"{len(transport)} request(s) failed in transport, e.g. {transport['error'].iloc[0][:200]}",
        )
    return Check(
        name="session_progress",
        passed=True,
        evidence=evidence,
        summary=f"{int(completed.sum())} requests and {sessions_done} of {len(by_instance)} sessions "
        f"completed, {len(timeouts)} timed out",
    )
