"""The event loop a replay runs on: uvloop, with the garbage collector tuned for hundreds of streams."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def run_tuned(main: Coroutine[Any, Any, T]) -> T:
    """Run a replay's coroutine on uvloop with the garbage collector tuned for it."""
    # The cyclic garbage collector stops the event loop for tens of ms when it scans the young objects
    # hundreds of streams make (bench-replay saw a 44 ms pause): what exists before the replay is frozen
    # out of its scans and it runs 50x less often; reference counting still frees almost everything.
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    gc.set_threshold(35_000, *threshold[1:])
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
