"""Device memory of host processes, read through NVML from outside them.

``device_bytes(pids)`` sums NVML's used-memory figure of every compute process on every visible device whose
host PID is in ``pids``: what the driver has mapped for those processes (their CUDA contexts included), not what
their own allocators say. None when NVML is unavailable (no NVIDIA driver, or a driver that withholds
per-process figures).
"""

from __future__ import annotations

import pynvml


def device_bytes(pids: set[int]) -> int | None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        total = 0
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid not in pids:
                    continue
                if process.usedGpuMemory is None:  # NVML_VALUE_NOT_AVAILABLE
                    return None
                total += process.usedGpuMemory
        return total
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
