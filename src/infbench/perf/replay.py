"""The replay client alone: how much latency and CPU it adds (issue 4 benchmark).

A local server (:mod:`infbench.serving.instant`) streams instantly and stamps
its own receive and first-token times (CLOCK_MONOTONIC, as the client's). Added
latency = client TTFT - (server first token - server receive): request
serialization, loopback, server-side parsing before the handler, and the
client's SSE reading. Reported p50/p99 per concurrency, with the client's CPU
use (process CPU time / wall time; 100% = one core).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from infbench import atomic
from infbench.serving import replay, replay_settings, servers
from infbench.serving.sessions import Session
from infbench.serving.traces import weka
from infbench.serving.workload import draw


def _sessions(n: int, input_tokens: int, output_tokens: int, think_time_s: float) -> list[Session]:
    """Sessions of 8 requests on a growing context, think times uniform in [0.5, 1.5] x ``think_time_s``
    (so lanes that start together drift apart instead of sending in bursts)."""
    bs = 16
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        think = think_time_s * rng.uniform(0.5, 1.5, 8)
        reqs = [
            {
                "t": float(think[:k].sum()),
                "in": input_tokens * (k + 1),
                "out": output_tokens,
                "hash_ids": list(range(-(-input_tokens * (k + 1) // bs))),
                "think_time": float(think[k]) * (k > 0),
            }
            for k in range(8)
        ]
        out.append(weka.session({"id": f"b{i}", "block_size": bs, "requests": reqs}))
    return out


def run(
    concurrencies=(4, 64, 512),
    window_s: float = 5.0,
    input_tokens: int = 256,
    output_tokens: int = 32,
    think_time_s: float = 0.0,
    warmup_s: float = 2.0,
    out_md: str | None = None,
) -> str:
    sessions = _sessions(64, input_tokens, output_tokens, think_time_s)
    spec = servers.ServerSpec(command=["{python}", "-m", "infbench.serving.instant", "--port", "{port}"])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        with servers.launched("instant", spec, servers.LaunchVars(), Path(tmp) / "server.log") as base:
            for c in concurrencies:
                st = replay_settings.ReplaySettings(
                    base_url=base,
                    model="bench",
                    concurrency=c,
                    seed=0,
                    warmup_s=warmup_s,
                    window_s=window_s,
                    request_timeout_s=30.0,
                    idle_cap_s=10.0,
                    token_low=1000,
                    token_high=30000,
                    marker_tokens=4,
                    temperature=0.0,
                    start_ratio=(0.0, 1.0),
                )
                cpu0, wall0 = time.process_time(), time.perf_counter()
                recs = replay.run(draw(sessions, c), st)
                cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
                win = [r for r in recs if r.in_window and r.ok and r.server_ttft is not None]
                added = np.array([r.ttft - r.server_ttft for r in win]) * 1e3
                to_server = np.array([r.server_receive_time - r.send_time for r in win]) * 1e3
                pct = lambda x, q: float(np.percentile(x, q)) if len(x) else None  # noqa: E731
                rows.append(
                    {
                        "concurrency": c,
                        "think_s": think_time_s,
                        "requests": len(win),
                        "failed": sum(not r.ok for r in recs),
                        "requests_per_s": len(win) / window_s,
                        "added_ttft_p50_ms": pct(added, 50),
                        "added_ttft_p99_ms": pct(added, 99),
                        "send_to_server_p50_ms": pct(to_server, 50),
                        "send_to_server_p99_ms": pct(to_server, 99),
                        "client_cpu_pct": 100.0 * cpu / wall,
                    }
                )
    table = pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g")
    if out_md:
        atomic.write_text(out_md, table + "\n")
    return table
