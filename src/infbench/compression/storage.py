"""Storage accounting (PROTOCOL A2).

``S_pkg`` is every byte of the package (:func:`infbench.package_files.package_bytes`).

``S_res`` is the model storage still held after loading and after inference with caches released, measured by
the pipeline from outside the sandboxed worker (:mod:`infbench.sandbox.meter`). Each worker runs in its own
memory cgroup (:mod:`infbench.sandbox.cgroup`): the figure is everything the kernel charges it once it has
reclaimed what it can of it (anonymous memory, tmpfs and shared memory, memfds, secret memory, kernel memory
that holds data such as pipe and socket buffers, swap; nothing subtracted), plus the PSS of the package files
its processes map (an mmapped GGUF is file-backed pages: counted while mapped, as before). The page cache of
the read-only files it read (a safetensors file copied into tensors, the runtime's libraries) and the dentries
and inodes of the files it looked at are what the reclaim frees: storage the package already pays for as
``S_pkg``, or the kernel's caches, which hold nothing a package can keep. Where no cgroup can be made the figure
comes from ``/proc`` (PSS, files written, memfds, deleted files, pipes) and the record says why.

From that the same figure of a baseline worker started in the same job is subtracted: it imported the same
runtime modules and loaded nothing. On CUDA the device memory of the sandbox's processes (NVML,
:mod:`infbench.gpu_memory`) minus the baseline's (its CUDA context) is added. What could inflate the figure
(allocator caches, fragmentation, a package that skips trimming) is the package's to avoid: the worker trims the
heap before each measurement. What could deflate it is not in the package's hands: the meter runs in the parent.

Runtime state that a first inference creates (lazily loaded GPU kernels, the CPU kernels oneDNN and PyTorch
keep for each shape of a product) is made in both workers before the package is read
(:mod:`infbench.compression.warm_up`). What the empty baseline still cannot have, because the runtime creates it
only once it has a model (per-layer bookkeeping at load, kernels of shapes no warm-up ran), is covered by a
stated allowance, ``verification.runtime_allowance_mib`` (default 16 MiB). A package can therefore hide at most
the allowance.

The in-process count of live tensors and arrays (:mod:`infbench.compression.inprocess_memory`, run inside the
worker) stays as a
second figure; ``S_res = max(in-process count, outside figure - allowance)``.

The measured worker's cgroup has a hard limit (:func:`memory_cap`): the largest storage limit it is judged
under (or its package size, if larger: such a package fails ``storage_package`` anyway and is still measured),
plus the baseline, the allowance and the temporary workspace of the largest request (:func:`workspace_bytes`;
the protocol excludes temporary workspace from ``S_res``, so an honest package may use it during a call).
A package of runtime ``vllm`` brings weights and no code: vLLM's engine and the pipeline's runtime code are all
that run in its worker. The engine holds, beside the model, a KV pool it preallocates
(``verification.vllm_kv_cache_mib``) and buffers it makes at its first requests (measured: about 150 MiB of
shared memory and 45 MiB of heap for a 13 MB model, and about 50 MiB at load whatever the model), none of
which an empty worker can have. Its ``S_res`` is therefore the engine's own count of the tensors it loaded
from the package (parameters and buffers, each storage once, counted before its CPU kernels repack them), and
the outside figures are kept in the record beside it; its cap adds the KV pool and
``verification.vllm_workspace_mib``.
Beyond it the kernel kills the worker and the record fails ``memory_limit``.
"""

from __future__ import annotations

from pydantic import BaseModel

from infbench.config.model import MemoryWorkspace
from infbench.sandbox.meter import MemoryUse


def workspace_bytes(workspace: MemoryWorkspace, *, batch: int, n_last: int, vocab: int) -> int:
    """The workspace of the largest scoring request: ``batch`` rows of ``n_last`` positions over ``vocab``."""
    return int(workspace.logits_copies * batch * n_last * vocab * 4 + workspace.extra_mib * 2**20)


def memory_cap(
    *,
    limit_bytes: int,
    s_pkg_bytes: int,
    baseline: MemoryUse,
    allowance_bytes: int,
    workspace_bytes: int,
    engine_workspace_bytes: int = 0,
) -> int:
    """The hard memory limit of the measured worker's cgroup (``engine_workspace_bytes``: runtime ``vllm``)."""
    return (
        max(limit_bytes, s_pkg_bytes)
        + baseline.counted_bytes
        + allowance_bytes
        + workspace_bytes
        + engine_workspace_bytes
    )


class ResidentMeasure(BaseModel):
    """Every figure behind ``S_res``; the two ``s_res_*`` properties are what the storage check uses."""

    baseline: MemoryUse
    after_load: MemoryUse
    after_inference: MemoryUse
    inprocess_after_load: int
    inprocess_after_inference: int
    device_baseline: int | None = None  # NVML bytes of the baseline worker (its CUDA context)
    device_after_load: int | None = None
    device_after_inference: int | None = None
    peak_rss_bytes: dict[str, int] = {}  # sampled every 10 ms, per request kind (load, logits, prefill, decode)
    runtime_allowance_bytes: int
    engine: bool = False  # runtime vllm: S_res is the engine's count of the model's tensors (the outside figure kept)

    def outside(self, use: MemoryUse, device: int | None) -> int:
        """The sandbox's memory beyond the baseline's, on the host and (CUDA) the device."""
        host = use.counted_bytes - self.baseline.counted_bytes
        gpu = device - (self.device_baseline or 0) if device is not None else 0
        return max(0, host) + max(0, gpu)

    def _s_res(self, use: MemoryUse, device: int | None, inprocess: int) -> int:
        if self.engine:
            return inprocess
        return max(self.outside(use, device) - self.runtime_allowance_bytes, inprocess, 0)

    @property
    def s_res_after_load(self) -> int:
        return self._s_res(self.after_load, self.device_after_load, self.inprocess_after_load)

    @property
    def s_res_after_inference(self) -> int:
        return self._s_res(self.after_inference, self.device_after_inference, self.inprocess_after_inference)
