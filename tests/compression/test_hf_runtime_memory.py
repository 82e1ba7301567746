"""The hf runtime's own memory, measured as final verification measures it (sandboxed worker, outside meter).

oneDNN builds and keeps a kernel for every shape of a BF16 product it sees on the CPU, and PyTorch keeps state
of its own per shape. Prompts of many lengths (the accuracy gate's) grew an honest BF16 package's process by
55 MB and the 4-bit GPTQ baseline's by 65 MB, charged to ``S_res``: generation prefills in fixed blocks. The
verification's own request shapes then still left the GPTQ baseline charged 32 MiB beyond its tensors, over
the 16 MiB allowance (it failed ``storage_resident`` under its own limit): both workers now run them on a
twin of the source before the package is read (compression.warm_up). ``gate_consistency`` scores each gate
answer after its prompt in one pass, one shape per item (about 2.7 MiB each: the embedded GPTQ baselines were
charged 0.13 GiB beyond their tensors and failed ``storage_resident``): the warm-up runs those shapes too.
On a CPU with AMX, BF16 products run natively and each new row count of a prefill (the gate's last, smaller
batches) kept about 3 MiB, the first long prompts about 11 MiB more: the embedded GPTQ baselines held 20 MB more
after inference than after loading and failed ``storage_resident`` there; the warm-up now prefills every row
count of a gate batch and a full batch at the longest gate prompt.
"""

import numpy as np
import pytest
from conftest import needs_sandbox

from infbench.compression.baselines.package import bf16
from infbench.compression.client import EmptyWorkers, SubmissionProcess
from infbench.compression.harness.greedy import greedy
from infbench.compression.measure import source_shapes
from infbench.compression.runtimes import preload_modules
from infbench.compression.submission import load_manifest
from infbench.config.model import SandboxSettings, VerificationSettings

pytestmark = [pytest.mark.slow, needs_sandbox()]


def test_a_verification_and_prompts_of_many_lengths_leave_the_tensors_and_no_more(smollm2_source, tmp_path):
    """After a verification's request shapes the BF16 SmolLM2 package's worker holds under 8 MiB beyond its
    tensors and the empty worker (measured: 23.3 MiB without the warm-up, 4.9 MiB with it; its safetensors are
    mapped, so after load they are not all paged in yet), and batches of prompts of 12 more lengths add under
    8 MiB."""
    src, _ = smollm2_source
    pkg = tmp_path / "pkg"
    bf16(src / "hf", "smollm2-135m", pkg)
    settings = VerificationSettings(
        score_batch_size=8, decode={"prompt_tokens": 128, "output_tokens": 4, "rounds": 1, "requests_per_round": 1}
    )
    rng = np.random.default_rng(0)
    gate_pairs = [
        (int(p), int(a))
        for p, a in zip(rng.choice(np.arange(20, 200), size=12, replace=False), rng.integers(2, 40, size=12))
    ]
    shapes = source_shapes(
        src / "hf",
        rows=12,
        context_tokens=64,
        continuation_tokens=96,
        settings=settings,
        gate_batch=10,
        gate_answers=gate_pairs,
    )
    process = dict(
        sandbox=SandboxSettings(allow_unsandboxed=False, tmp_mb=256),
        preload=preload_modules(pkg, load_manifest(pkg)),
        device="cpu",
        threads=2,
        timeout_s=600,
        warm_up=shapes,
    )
    empty = EmptyWorkers().memory(**process)[0].counted_bytes
    with SubmissionProcess(pkg, vocab_size=49152, max_logits=8 * 96 * 49152, **process) as proc:
        tensors = proc.load()["inprocess_resident_bytes"]
        for sequences, tokens, n_last in shapes.scores:
            proc.score(rng.integers(0, 49152, size=(sequences, tokens)), n_last)
        for rows, prompt, steps in shapes.generations:
            greedy(proc, rng.integers(0, 49152, size=(rows, prompt)).tolist(), steps)
        proc.release()
        after_verification = proc.memory().counted_bytes
        # the gate's last batches: fewer rows than a full one, prompts up to the longest gate prompt
        longest = max(p for p, _ in gate_pairs)
        for rows in (7, 3):
            greedy(proc, [rng.integers(0, 49152, size=longest - i).tolist() for i in range(rows)], 4)
        proc.release()
        after_gate = proc.memory().counted_bytes
        lengths = rng.choice(np.arange(8, 300), size=12, replace=False)
        for batch in (lengths[:10], lengths[10:]):
            out = greedy(proc, [rng.integers(0, 49152, size=int(n)).tolist() for n in batch], 3)
            assert [len(g.tokens) for g in out] == [3] * len(batch)
        proc.release()
        grown = proc.memory().counted_bytes - after_verification
    beyond = after_verification - empty - tensors
    assert beyond < 8 << 20, f"{beyond / 2**20:.1f} MiB beyond the package's tensors after the verification's shapes"
    gate_grown = after_gate - after_verification
    assert gate_grown < 2 << 20, f"the gate's smaller batches and longest prompts grew it {gate_grown / 2**20:.1f} MiB"
    assert grown < 8 << 20, f"the process grew {grown / 2**20:.1f} MiB over batches of 12 prompt lengths"
