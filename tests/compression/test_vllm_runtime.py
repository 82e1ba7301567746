"""The ``vllm`` runtime (infbench.compression.runtimes.vllm) on the real engine (vLLM's CPU build, run by the
vLLM environment's interpreter) and the embedded source: in float32 its teacher-forced log-probs are
transformers' to rounding and their argmaxes the same; prefill and step give the logits one-pass scoring gives.
Skipped only where the vLLM environment is absent and this is not CI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infbench.perf import vllm_agreement
from infbench.vllm_env import vllm_python

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not vllm_python().exists() and not os.environ.get("CI"),
        reason="no vLLM environment (.venv-vllm: scripts/setup-env.sh)",
    ),
]

SRC = str(Path(vllm_agreement.__file__).resolve().parents[2])

CAUSAL = """
import sys, numpy as np
from pathlib import Path
from infbench.compression.runtimes.vllm import VllmRunner
r = VllmRunner(Path(sys.argv[1]), "cpu", kv_cache_mib=512, dtype="float32")
ids = np.random.default_rng(1).integers(100, 40000, size=(2, 40))
s = r.score(ids, 8).float()
p = r.prefill([ids[0, :33], ids[1, :33]], 2).float()
q = r.step(ids[:, 33], np.array([0, 1])).float()
q1 = r.step(ids[1:, 34], np.array([1])).float()
r.release()
print(float((p - s[:, 0]).abs().max()), float((q - s[:, 1]).abs().max()), float((q1[0] - s[1, 2]).abs().max()))
"""


def test_vllm_scores_as_transformers_in_float32(smollm2_source):
    src, _ = smollm2_source
    table = vllm_agreement.run(
        str(src / "hf"), dtypes=["float32"], contexts=None, rows=2, length=48, n_last=16, kv_cache_mib=512
    )
    row = table.splitlines()[-1].split("|")
    assert float(row[3]) < 1e-3, table  # measured 6e-5 on the embedded contexts
    assert float(row[5]) == 1.0, table


def test_vllm_prefill_and_step_are_its_one_pass_logits(smollm2_source):
    src, _ = smollm2_source
    done = subprocess.run(
        [str(vllm_python()), "-c", CAUSAL, str(src / "hf")],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    diffs = [float(x) for x in done.stdout.split()[-3:]]
    assert max(diffs) < 1e-4, (diffs, sys.executable)
