"""The hf runtime's own memory, measured as final verification measures it (sandboxed worker, outside meter).

oneDNN builds and keeps kernels for every matrix shape it sees on the CPU; prompts of many lengths (the
accuracy gate's) grew an honest BF16 package's process by 55 MB and the 4-bit GPTQ baseline's by 65 MB,
charged to ``S_res`` (the GPTQ baseline failed its own 0.12 GiB limit). Generation prefills in fixed blocks.
"""

import numpy as np
import pytest
from conftest import needs_sandbox

from infbench.compression.baselines.package import bf16
from infbench.compression.client import SubmissionProcess
from infbench.compression.runtimes import preload_modules
from infbench.compression.submission import load_manifest
from infbench.config.model import SandboxSettings

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
