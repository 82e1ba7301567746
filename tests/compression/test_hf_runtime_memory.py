"""The hf runtime's own memory, measured as final verification measures it (sandboxed worker, outside meter).

oneDNN builds and keeps kernels for every matrix shape it sees on the CPU; prompts of many lengths (the
accuracy gate's) grew an honest BF16 package's process by 55 MB and the 4-bit GPTQ baseline's by 65 MB,
charged to ``S_res`` (the GPTQ baseline failed its own 0.12 GiB limit). Generation prefills in fixed blocks.
"""

import numpy as np
import pytest
from conftest import needs_sandbox

from infbench.compression.baselines.package import bf16
from infbench.compression.client import EmptyWorkers, SubmissionProcess
from infbench.compression.evaluation import source_shapes
from infbench.compression.runtimes import preload_modules
from infbench.compression.submission import load_manifest
from infbench.config.model import SandboxSettings, VerificationSettings

pytestmark = [pytest.mark.slow, needs_sandbox()]


def test_prompts_of_many_lengths_leave_the_process_as_loaded(smollm2_source, tmp_path):
    src, _ = smollm2_source
    bf16(src / "hf", "smollm2-135m", tmp_path / "pkg")
    pkg = tmp_path / "pkg"
    process = dict(
        sandbox=SandboxSettings(allow_unsandboxed=False, tmp_mb=256),
        preload=preload_modules(pkg, load_manifest(pkg)),
        threads=2,
        timeout_s=600,
    )
    rng = np.random.default_rng(0)
    with SubmissionProcess(pkg, **process) as proc:
        proc.load()
        proc.generate([1, 2, 3], 2)  # the first pass's one-time allocations, the same for every prompt length
        proc.release()
        after_first = proc.memory().counted_bytes
        for n in rng.choice(np.arange(8, 300), size=12, replace=False):
            tokens = proc.generate(rng.integers(0, 49152, size=int(n)).tolist(), 2)[0]
            assert len(tokens) == 2
        proc.release()
        grown = proc.memory().counted_bytes - after_first
    assert grown < 8 << 20, f"the process grew {grown / 2**20:.1f} MiB over 12 prompt lengths"


def test_a_verifications_shapes_are_made_in_the_empty_worker_too(smollm2_source, tmp_path):
    """Each new shape of a BF16 product leaves kernels behind (oneDNN's primitive cache, PyTorch's own state):
    after a verification's requests the 4-bit GPTQ baseline was charged 32 MiB beyond its tensors, over the
    16 MiB allowance, and failed ``storage_resident`` under its own limit. Both workers now run the source's
    shapes before the package is read (compression.warm_up). Measured: the BF16 SmolLM2 package's worker held
    23.3 MiB beyond its tensors and the empty worker after these requests without the warm-up, 4.9 MiB with it
    (its safetensors are mapped: after load they are not all paged in yet)."""
    src, _ = smollm2_source
    pkg = tmp_path / "pkg"
    bf16(src / "hf", "smollm2-135m", pkg)
    settings = VerificationSettings(
        score_batch_size=8, decode={"prompt_tokens": 128, "output_tokens": 4, "rounds": 1, "requests_per_round": 1}
    )
    shapes = source_shapes(src / "hf", rows=12, context_tokens=64, continuation_tokens=96, settings=settings)
    process = dict(
        sandbox=SandboxSettings(allow_unsandboxed=False, tmp_mb=256),
        preload=preload_modules(pkg, load_manifest(pkg)),
        device="cpu",
        threads=2,
        timeout_s=600,
        warm_up=shapes,
    )
    rng = np.random.default_rng(0)
    empty = EmptyWorkers().memory(**process)[0].counted_bytes
    with SubmissionProcess(pkg, vocab_size=49152, **process) as proc:
        tensors = proc.load()["inprocess_resident_bytes"]
        for sequences, tokens, n_last in shapes.logits:
            proc.logits(rng.integers(0, 49152, size=(sequences, tokens)), n_last)
        for prompt, new in [*shapes.generations, (300, 4), (45, 4)]:  # and prompts of other lengths
            proc.generate(rng.integers(0, 49152, size=prompt).tolist(), new)
        proc.release()
        after_inference = proc.memory().counted_bytes
    beyond = after_inference - empty - tensors
    assert beyond < 8 << 20, f"{beyond / 2**20:.1f} MiB beyond the package's tensors"
