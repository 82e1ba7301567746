"""The CUDA paths of the compression worker: resident storage read from outside the worker (NVML's device
memory of the sandbox's processes, the host meter for host-side copies), each minus a baseline worker's, and
decode timing on the GPU. Skipped where no GPU is visible (CI has none; test_compression_eval covers the CPU
paths); run on a GPU machine, under bubblewrap, with
``INFBENCH_REQUIRE_SANDBOX=1 pytest -n 0 tests/compression/test_cuda_paths.py`` (docs/sandbox.md: what a GPU
machine needs for the sandbox). The order of bubblewrap's arguments that kept every CUDA worker from starting
there is checked on the CPU (tests/sandbox/test_bwrap_args.py)."""

import json
import textwrap
from pathlib import Path

import pytest
import torch
import yaml
from conftest import needs_sandbox

from infbench.compression.client import SubmissionProcess
from infbench.compression.harness.decode import measure as measure_decode
from infbench.compression.harness.greedy import greedy
from infbench.compression.runtimes import preload_modules
from infbench.compression.submission import load_manifest
from infbench.config.model import SandboxSettings

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"), needs_sandbox()]

VOCAB = 4096
ALLOWANCE = 16 << 20  # verification.runtime_allowance_mib's default
SANDBOX = SandboxSettings(allow_unsandboxed=False, tmp_mb=1024)
MIB = 1 << 20

PYTHON_RUNTIME = """
import numpy as np, torch
from pathlib import Path
from transformers import AutoModelForCausalLM

class Model:
    def __init__(self, package_dir, device):
        self.device = device
        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / "model", dtype=torch.bfloat16)
        self.model = self.model.to(device).eval()

    @torch.inference_mode()
    def last_logits(self, rows):
        # COPY
        ids = [torch.as_tensor([r], device=self.device) for r in rows]
        return torch.cat([self.model(input_ids=x, logits_to_keep=1).logits[:, -1] for x in ids])

    def prefill(self, rows, max_new_tokens):
        self.rows = [list(r) for r in rows]
        return self.last_logits(self.rows)

    def step(self, tokens, rows):
        for token, row in zip(tokens, rows):
            self.rows[row].append(int(token))
        return self.last_logits([self.rows[row] for row in rows])

    def release(self):
        torch.cuda.empty_cache()

def load(package_dir, device):
    return Model(package_dir, device)
"""

COPIES = {
    "honest": "",
    "gpu_fp32_copy": "if not hasattr(self, 'copy'): self.copy = [p.float().clone() for p in self.model.parameters()]",
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, int]:
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("cuda_ckpt") / "model"
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=256,
            intermediate_size=704,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=1024,
            tie_word_embeddings=True,
        )
    )
    model.to(torch.bfloat16).save_pretrained(out)
    return out, sum(p.numel() * p.element_size() for p in model.parameters())


def package(root: Path, checkpoint: Path, runtime: str, code: str = "") -> Path:
    import shutil

    shutil.copytree(checkpoint, root / "model")
    manifest = {"name": root.name, "source": "tiny", "runtime": runtime, "weights": "model", "tokenizer": "model"}
    if runtime == "python":
        (root / "inference.py").write_text(textwrap.dedent(code))
        manifest["entrypoint"] = "inference.py:load"
    (root / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    return root


def resident(pkg: Path) -> dict[str, int]:
    """Device (NVML) and host (outside meter) bytes beyond a baseline worker's, after load and after inference;
    and the worker's own allocator figure."""
    manifest = load_manifest(pkg)
    vocab = json.loads((pkg / manifest.weights / "config.json").read_text())["vocab_size"]  # the package's own
    common = dict(sandbox=SANDBOX, preload=preload_modules(pkg, manifest), device="cuda", timeout_s=300)
    with SubmissionProcess(None, baseline=True, **common) as empty:
        empty.wait_started()  # its CUDA context is made before it says it is ready (worker.main)
        device0, host0 = empty.device_memory(), empty.memory().counted_bytes
    assert device0 is not None, "NVML gives no per-process device memory here"
    with SubmissionProcess(pkg, vocab_size=vocab, max_logits=8 * vocab, **common) as proc:
        inprocess = proc.load()["inprocess_resident_bytes"]
        out = {"device_load": proc.device_memory() - device0, "host_load": proc.memory().counted_bytes - host0}
        if load_manifest(pkg).runtime == "hf":
            proc.score([[1, 2, 3, 4, 5, 6, 7, 8]], 4)
        greedy(proc, [[1, 2, 3], [4, 5]], 8)
        proc.release()
        out.update(
            device_after=proc.device_memory() - device0,
            host_after=proc.memory().counted_bytes - host0,
            inprocess=inprocess,
            sandbox=proc.sandbox_record.kind,
        )
    print(pkg.name, {k: v if isinstance(v, str) else round(v / MIB, 1) for k, v in out.items()})
    assert out["sandbox"] == "bwrap", out
    return out


@pytest.fixture(scope="module")
def checkpoint_1b(tmp_path_factory) -> tuple[Path, int]:
    """Llama 3.2 1B's shape in BF16, random weights (2,357 MiB)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("cuda_ckpt_1b") / "model"
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(
            LlamaConfig(
                hidden_size=2048,
                intermediate_size=8192,
                num_hidden_layers=16,
                num_attention_heads=32,
                num_key_value_heads=8,
                vocab_size=128256,
                tie_word_embeddings=True,
                max_position_embeddings=4096,
            )
        )
    model.to(torch.bfloat16).save_pretrained(out)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return out, weight_bytes


def test_an_honest_bf16_1b_package_is_its_weights_after_load_and_after_inference(tmp_path, checkpoint_1b):
    ckpt, weight_bytes = checkpoint_1b
    r = resident(package(tmp_path / "bf16_1b", ckpt, "hf"))
    for when in ("load", "after"):
        outside = max(0, r[f"host_{when}"]) + max(0, r[f"device_{when}"])  # storage.ResidentMeasure.outside
        assert weight_bytes <= outside <= weight_bytes + ALLOWANCE, (when, (outside - weight_bytes) / MIB)


@pytest.mark.parametrize("runtime", ["hf", "python"])
def test_resident_bytes_are_the_weights_on_cuda(tmp_path, checkpoint, runtime):
    ckpt, weight_bytes = checkpoint
    r = resident(package(tmp_path / runtime, ckpt, runtime, PYTHON_RUNTIME))
    assert weight_bytes <= r["inprocess"] <= 1.05 * weight_bytes
    # the runtime state of the first inference is the empty worker's too (compression.warm_up.cuda)
    assert r["host_load"] <= ALLOWANCE and r["host_after"] <= ALLOWANCE
    # NVML counts what the caching allocator reserved: whole segments (measured on the H200: 26 MiB for these
    # 7.6 MiB of weights, after load and after inference with the cache emptied)
    assert weight_bytes <= r["device_load"] <= 1.05 * weight_bytes + 32 * MIB
    assert r["device_after"] <= 1.05 * weight_bytes + 32 * MIB


def test_a_lazy_full_precision_copy_on_the_gpu_is_seen_from_outside(tmp_path, checkpoint):
    ckpt, weight_bytes = checkpoint
    r = resident(
        package(tmp_path / "gpu_copy", ckpt, "python", PYTHON_RUNTIME.replace("# COPY", COPIES["gpu_fp32_copy"]))
    )
    # an fp32 copy is 2x the bf16 weights; part of it lands in segments the allocator had reserved already
    # (measured: +14.0 MiB for a 15.3 MiB copy)
    assert r["device_after"] - r["device_load"] >= 1.5 * weight_bytes


def test_decode_timing_on_cuda(tmp_path, checkpoint):
    ckpt, _ = checkpoint
    pkg = package(tmp_path / "hf", ckpt, "hf")
    with SubmissionProcess(
        pkg,
        sandbox=SANDBOX,
        preload=preload_modules(pkg, load_manifest(pkg)),
        device="cuda",
        timeout_s=300,
        vocab_size=VOCAB,
        max_logits=VOCAB,
    ) as proc:
        proc.load()
        timing = measure_decode(
            proc,
            vocab_size=VOCAB,
            prompt_tokens=256,
            output_tokens=32,
            rounds=3,
            requests_per_round=3,
            warmup=1,
            seed=0,
        )
    assert len(timing.round_means_s) == 3 and timing.tps > 0
    print(f"CUDA decode: {timing.tps:.1f} tok/s (L = {timing.latency_s * 1e3:.2f} ms for 31 tokens)")
