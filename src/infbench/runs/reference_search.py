"""The scripted reference search: the embedded default's example agent run.

A deterministic policy over llama.cpp quantizations of the source's F16 twin:
each candidate in the configured order is built, published as a version (with
its weight reconstruction error as a local metric), scored by the search-time
reward (``infbench reward``'s function, on the search set) and kept if it beats
the best so far; then a completion is declared and the best version is copied
to ``final/``. Every event carries the time it really happened, so the run
directory is a genuine run, ingested like any other.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import yaml

from infbench import atomic
from infbench.compression.baselines.gguf import WEIGHTS, quantize
from infbench.compression.baselines.package import copy_tokenizer, write_package
from infbench.compression.client import EmptyWorkers
from infbench.compression.submission import Manifest
from infbench.compression.tasks import Task
from infbench.compression.verification import reward
from infbench.config.model import (
    ReferenceSearchSettings,
    SandboxSettings,
    VerificationSettings,
)
from infbench.layout import Layout
from infbench.runs.discover import REFERENCE_AGENT as AGENT
from infbench.runs.schema import RunSpec

KEY = "runs.reference_search.candidates"


def _now() -> datetime:
    return datetime.now(UTC)


def reconstruction_error(f16_gguf: Path, quantized: Path) -> float:
    """Relative squared error of the quantized weights against the F16 twin, over every quantized tensor."""
    import gguf

    from infbench import gguf_reading

    reference = {t.name: t for t in gguf_reading.Reader(f16_gguf).tensors}
    num = den = 0.0
    for tensor in gguf_reading.Reader(quantized).tensors:
        if tensor.tensor_type == gguf.GGMLQuantizationType.F32:
            continue
        ref = reference[tensor.name]
        w = np.asarray(gguf.quants.dequantize(ref.data, ref.tensor_type), dtype=np.float64).ravel()
        q = np.asarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float64).ravel()
        num += float(np.sum((q - w) ** 2))
        den += float(np.sum(w * w))
    return num / den


class _Log:
    def __init__(self, path: Path):
        self.path = path

    def event(self, **fields) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({"time": _now().isoformat(), **fields}, sort_keys=True) + "\n")


def run(
    out_dir: str | Path,
    *,
    f16_gguf: str,
    checkpoint: str,
    task: Task,
    search: ReferenceSearchSettings,
    results: Layout,
    settings: VerificationSettings,
    sandbox: SandboxSettings,
    threads: int,
    worker_log: str | None = None,
) -> str:
    """Search, leaving a run directory at ``out_dir``; returns the name of the best version."""
    plan, budget_hours = search.candidates, search.budget_hours
    start = _now()
    with atomic.atomic_path(out_dir, directory=True) as tmp:
        versions, events = tmp / "versions", _Log(tmp / "events.jsonl")
        versions.mkdir()
        best: tuple[float, str] | None = None
        empty_workers = EmptyWorkers()  # one empty llama.cpp worker for every candidate's S_res
        for step, cand in enumerate(plan):
            version = f"v{step + 1}-{cand.name}"
            events.event(
                type="tool_call",
                name=f"quantize {cand.type}" + (f" token_embd={cand.token_embd}" if cand.token_embd else ""),
            )
            manifest = Manifest(
                name=cand.name,
                source=task.source,
                runtime="llama.cpp",
                weights=WEIGHTS,
                tokenizer="tokenizer",
                description=f"reference search: llama.cpp {cand.type}"
                + (f", token_embd {cand.token_embd}" if cand.token_embd else ""),
            )

            def fill(pkg: Path, cand=cand) -> None:
                quantize(f16_gguf, pkg / WEIGHTS, cand.type, threads, token_embd=cand.token_embd, key=KEY)
                copy_tokenizer(Path(checkpoint), pkg / "tokenizer")

            write_package(versions / version, manifest, fill)
            mse = reconstruction_error(Path(f16_gguf), versions / version / WEIGHTS)
            atomic.write_json(
                versions / f"{version}.json",
                {"published_at": _now().isoformat(), "local_metrics": {"weight_rel_mse": mse}},
            )
            events.event(type="tool_call", name="infbench reward")
            record = reward(
                str(versions / version),
                task,
                results=results,
                settings=settings,
                sandbox=sandbox,
                threads=threads,
                log_path=tmp / "reward_log.jsonl",
                worker_log=worker_log,
                empty_workers=empty_workers,
            )
            if record.reward > 0 and (best is None or record.reward > best[0]):
                best = (record.reward, version)
        if best is None:
            raise RuntimeError(f"reference search: no candidate of {KEY} has a positive reward on {task.name}")
        shutil.copytree(versions / best[1], tmp / "final")
        events.event(type="completion", note=f"best: {best[1]} (reward {best[0]:.4f})")
        spec = RunSpec(
            agent=AGENT,
            track="compression",
            task=task.name,
            budget_hours=budget_hours,
            start=start,
            end=_now(),
            final_submission="final",
        )
        (tmp / "run.yaml").write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    return best[1]
