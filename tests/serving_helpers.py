"""Shared helpers of the serving tests: a real local server process and replay settings."""

from __future__ import annotations

import contextlib
from pathlib import Path

from infbench.serving import servers
from infbench.serving.replay_settings import ReplaySettings


@contextlib.contextmanager
def instant_server(log: Path, *args: str, startup_timeout_s: float = 60):
    spec = servers.ServerSpec(
        command=["{python}", "-m", "infbench.serving.instant", "--port", "{port}", *args],
        startup_timeout_s=startup_timeout_s,
    )
    with servers.launched("instant", spec, servers.LaunchVars(), log) as base:
        yield base


def settings(base: str, **kw) -> ReplaySettings:
    values = dict(
        base_url=base,
        model="model",
        concurrency=1,
        seed=0,
        warmup_s=0.0,
        window_s=5.0,
        request_timeout_s=5.0,
        idle_cap_s=10.0,
        token_low=1000,
        token_high=30000,
        marker_tokens=2,
        temperature=0.0,
        start_ratio=(0.0, 0.0),
    )
    values.update(kw)
    return ReplaySettings(**values)
