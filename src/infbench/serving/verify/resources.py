"""What a verified server could use, and the devices its D divides by (PROTOCOL B5; not in the paper).

A server is charged for ``deployment.devices`` devices and ``devices x cpus_per_device`` CPUs. Its sandbox gets
exactly those (:mod:`infbench.sandbox.cpus`, :func:`infbench.sandbox.policy.gpu_devices`); where it could reach
more (no cpuset here: affinity only), D divides by the devices whose CPUs or GPUs it could reach, never fewer
than charged.
"""

from __future__ import annotations

import math

from infbench.config.model import Deployment
from infbench.sandbox.launch import SandboxRecord


def gpus_bound(record: SandboxRecord) -> int:
    """GPUs whose device node was bound into the sandbox (``/dev/nvidia<N>``)."""
    return sum(d.removeprefix("/dev/nvidia").isdigit() for d in record.devices)


def devices_scored(dep: Deployment, record: SandboxRecord | None) -> int:
    """The devices D divides by: the charged ones, or the devices' worth of CPUs and GPUs the sandbox allowed."""
    n = dep.devices
    if record is None:
        return n
    if record.cpus is not None:
        n = max(n, math.ceil(record.cpus.reachable / dep.cpus_per_device))
    if dep.accelerator == "gpu":
        n = max(n, gpus_bound(record))
    return n


def describe(dep: Deployment, record: SandboxRecord | None) -> str:
    """The table's resources column, e.g. ``1 of 2 CPUs (cpuset), 3.2 CPU-s, d = 1``."""
    if record is None:
        return ""
    parts = []
    if record.cpus is not None:
        parts.append(record.cpus.describe())
        if record.cpus.cpu_time_s is not None:
            parts.append(f"{record.cpus.cpu_time_s:.1f} CPU-s")
    if dep.accelerator == "gpu":
        parts.append(f"{gpus_bound(record)} GPU(s) bound")
    parts.append(f"d = {devices_scored(dep, record)}")
    return ", ".join(parts)
