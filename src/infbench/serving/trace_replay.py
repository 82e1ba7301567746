"""``infbench replay``: a trace of any supported format replayed against any OpenAI-compatible endpoint.

The closed-loop client, records and scoring are the pipeline's (:mod:`infbench.serving.replay`,
:func:`infbench.serving.value.score`); what differs is where sessions and settings come from: a
trace file or directory read as it is (:mod:`infbench.serving.traces`), sessions in trace order
(each once) or a seeded endless draw, and settings from the command line.

Writes, in the output directory:

- ``records.parquet``: one row per request sent (:data:`infbench.serving.request_records.RECORD_SCHEMA`).
- ``summary.json``: :class:`TraceReplaySummary`: trace, settings, deployment, targets, why sending
  stopped, the measured window and the score (D, G, f; D and f only with latency targets).

The window scored is the one measured: ``window_s``, or less when the sessions ran out (trace
order) or the replay was stopped. Ctrl-C once stops sending and lets what is in flight finish (at
most the request timeout); Ctrl-C again cancels it. Either way the records and summary are written.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel
from tqdm import tqdm

from infbench import atomic, provenance
from infbench.config.model import Deployment
from infbench.errors import ConfigError, InputFileError
from infbench.serving import event_loop, replay, replay_settings, request_records, traces, workload
from infbench.serving.sessions import Session
from infbench.serving.value import Score, Targets, score

Order = Literal["trace", "draw"]
Ended = Literal["window", "trace", "interrupted"]


class TraceReplaySummary(BaseModel):
    trace: str
    trace_format: str
    server: str
    concurrency: int
    seed: int
    order: Order
    sessions_read: int
    sessions_eligible: int
    settings: replay_settings.ReplaySettings
    deployment: Deployment
    targets: Targets | None
    max_context_overflow_share: float
    ended: Ended
    measured_window_s: float
    records: str
    requests: int
    score: Score | None
    provenance: provenance.Provenance


def served_model(base_url: str) -> str:
    """The first model ``GET /v1/models`` names (what ``vllm bench serve`` does without ``--model``)."""
    url = base_url.rstrip("/") + "/v1/models"
    try:
        models = httpx.get(url, timeout=10.0).raise_for_status().json()["data"]
        return str(models[0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError("--model", f"not given, and {url} does not name one ({type(exc).__name__}: {exc})") from None


def load_sessions(trace: str, fmt: str, block_size: int, context_limit: int | None) -> tuple[str, list[Session], int]:
    """(format, the sessions that fit ``context_limit`` whole, sessions read)."""
    fmt = traces.detect(trace) if fmt == "auto" else fmt
    sessions = traces.read_trace(trace, fmt, block_size)
    kept = sessions if context_limit is None else workload.eligible(sessions, context_limit)
    if not kept:
        raise ConfigError("--context-limit", f"no session of {trace} fits {context_limit} tokens; nothing to replay")
    return fmt, kept, len(sessions)


def session_order(sessions: list[Session], order: Order, seed: int) -> Iterator[Session]:
    return iter(sessions) if order == "trace" else workload.draw(sessions, seed)


async def _replay_with_progress(rep: replay.Replay, show: bool) -> list[request_records.RequestRecord]:
    loop = asyncio.get_running_loop()
    total = rep.s.warmup_s + rep.s.window_s
    bar = tqdm(
        total=round(total),
        unit="s",
        desc="replay",
        disable=not show,
        file=sys.stderr,
        bar_format="{desc} {bar} {n_fmt}/{total_fmt} s {postfix}",
    )

    def interrupt() -> None:
        tqdm.write(
            "infbench replay: stopping: no new requests; waiting for those in flight (Ctrl-C again cancels them)"
            if rep.issuing and not rep.stopped
            else "infbench replay: cancelling the requests in flight",
            file=sys.stderr,
        )
        rep.stop()

    async def refresh() -> None:
        while True:
            ok = sum(r.ok for r in rep.records)
            if rep.sending_ended is not None:
                bar.set_description("draining")
            bar.n = round(min(rep.now(), rep.end, total))
            bar.set_postfix_str(f"completed {ok}, failed {len(rep.records) - ok}, in flight {rep.in_flight}")
            await asyncio.sleep(0.5)

    loop.add_signal_handler(signal.SIGINT, interrupt)
    ticker = asyncio.create_task(refresh()) if show else None
    try:
        return await rep.run()
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if ticker:
            ticker.cancel()
        bar.close()


def ended(rep: replay.Replay) -> Ended:
    if rep.stopped:
        return "interrupted"
    return "trace" if rep.busy_lanes == 0 else "window"


def run(
    trace: str,
    fmt: str,
    settings: replay_settings.ReplaySettings,
    deployment: Deployment,
    targets: Targets | None,
    order: Order,
    out_dir: str | Path,
    *,
    block_size: int,
    context_limit: int | None,
    max_context_overflow_share: float,
    progress: bool,
) -> TraceReplaySummary:
    fmt, sessions, n_read = load_sessions(trace, fmt, block_size, context_limit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rep = replay.Replay(session_order(sessions, order, settings.seed), settings)
    records = event_loop.run_tuned(_replay_with_progress(rep, progress))
    frame = request_records.write_records(records, str(out / "records.parquet"))
    sending_ended = rep.sending_ended if rep.sending_ended is not None else 0.0
    window = max(0.0, min(sending_ended, settings.warmup_s + settings.window_s) - settings.warmup_s)
    summary = TraceReplaySummary(
        trace=str(trace),
        trace_format=fmt,
        server=settings.base_url,
        concurrency=settings.concurrency,
        seed=settings.seed,
        order=order,
        sessions_read=n_read,
        sessions_eligible=len(sessions),
        settings=settings,
        deployment=deployment,
        targets=targets,
        max_context_overflow_share=max_context_overflow_share,
        ended=ended(rep),
        measured_window_s=window,
        records=str(out / "records.parquet"),
        requests=len(frame),
        score=score(frame, deployment, window, max_context_overflow_share, targets) if window > 0 else None,
        provenance=provenance.collect(
            {"trace_format": fmt, "order": order, "block_size": block_size, "context_limit": context_limit},
            workload.trace_hashes(trace),
        ),
    )
    atomic.write_json(out / "summary.json", summary.model_dump(mode="json"))
    return summary


def report(summary: TraceReplaySummary, out_dir: str | Path) -> str:
    """What a user reads when the replay ends: what was replayed, the score, where the files are."""
    s = summary.score
    head = (
        f"{summary.sessions_eligible} sessions of {summary.trace} ({summary.trace_format}, {summary.order} order) "
        f"against {summary.server}, concurrency {summary.concurrency}; ended: {summary.ended} "
        f"after {summary.measured_window_s:.1f} s of the {summary.settings.window_s:g} s window"
    )
    if s is None:
        body = "nothing measured: sending stopped before the warmup ended"
    else:

        def fmt(x, spec=".4g"):
            return "-" if x is None else format(x, spec)

        rows = [
            ("requests sent in the window", s.requests_in_window),
            ("completed", s.completed),
            ("failed", s.failed),
            ("context overflows", s.context_overflows),
            ("qualified", fmt(s.qualified, "d") if s.qualified is not None else "- (no targets)"),
            ("p90 TTFT (s)", fmt(s.p90_ttft_s)),
            ("p90 TPOT (s)", fmt(s.p90_tpot_s)),
            ("input / output tokens", f"{s.input_tokens} / {s.output_tokens}"),
            ("G (gross $ per GPU $)", fmt(s.G)),
            ("D (qualified $ per GPU $)", fmt(s.D)),
            ("f = D / G", fmt(s.f)),
        ]
        width = max(len(k) for k, _ in rows)
        body = "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)
        if not s.valid:
            body += f"\n  invalid: {s.invalid_reason}"
    out = Path(out_dir)
    return f"{head}\n{body}\nrecords: {out / 'records.parquet'}\nsummary: {out / 'summary.json'}"


def targets_file(path: str) -> Targets:
    """The latency targets of a calibration ``targets.json`` (``results/serving/calibration/``)."""
    try:
        return Targets.model_validate(json.loads(Path(path).read_text())["targets"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputFileError(path, f"not a calibration targets.json ({type(exc).__name__}: {exc})") from None
