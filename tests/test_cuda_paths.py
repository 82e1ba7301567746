"""The CUDA paths of the compression worker: resident storage from the device allocator (plus host-side
copies) and decode timing on the GPU. Skipped where no GPU is visible (CI has none; test_compression_eval
covers the CPU paths); run on a GPU machine with ``pytest tests/test_cuda_paths.py``."""

import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from infbench.compression.client import SubmissionProcess
from infbench.compression.decode import measure as measure_decode

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

VOCAB = 4096

PYTHON_RUNTIME = '''
import numpy as np, torch
from pathlib import Path
from transformers import AutoModelForCausalLM

class Model:
    def __init__(self, package_dir, device):
        self.device = device
        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / "model", dtype=torch.bfloat16)
        self.model = self.model.to(device).eval()

    @torch.inference_mode()
    def logits(self, input_ids, n_last):
        # COPY
        ids = torch.as_tensor(input_ids, device=self.device)
        return self.model(input_ids=ids, logits_to_keep=n_last).logits.float().cpu().numpy()

    @torch.inference_mode()
    def generate(self, input_ids, max_new_tokens):
        ids = list(input_ids)
        for _ in range(max_new_tokens):
            tok = int(self.model(input_ids=torch.as_tensor([ids], device=self.device)).logits[0, -1].argmax())
            ids.append(tok)
            yield tok

    def release(self):
        torch.cuda.empty_cache()

def load(package_dir, device):
    return Model(package_dir, device)
'''

COPIES = {
    "honest": "",
    "gpu_fp32_copy": "if not hasattr(self, 'copy'): self.copy = [p.float().clone() for p in self.model.parameters()]",
    "host_fp32_copy": "if not hasattr(self, 'copy'): self.copy = [p.float().cpu() for p in self.model.parameters()]",
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, int]:
    from transformers import LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("cuda_ckpt") / "model"
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=704,
                                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=1024, tie_word_embeddings=True))
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


def resident(pkg: Path) -> tuple[int, int]:
    with SubmissionProcess(pkg, device="cuda", timeout_s=300) as proc:
        loaded = proc.load()["resident_bytes"]
        proc.logits([[1, 2, 3, 4, 5, 6, 7, 8]], 4)
        proc.generate([1, 2, 3], 8)
        return loaded, proc.release()["resident_bytes"]


@pytest.mark.parametrize("runtime", ["hf", "python"])
def test_resident_bytes_are_the_weights_on_cuda(tmp_path, checkpoint, runtime):
    ckpt, weight_bytes = checkpoint
    loaded, after = resident(package(tmp_path / runtime, ckpt, runtime, PYTHON_RUNTIME))
    # the allocator rounds each block up to 512 bytes; caches are released after inference
    assert weight_bytes <= loaded <= 1.05 * weight_bytes
    assert after <= 1.05 * weight_bytes


@pytest.mark.parametrize("copy", ["gpu_fp32_copy", "host_fp32_copy"])
def test_a_lazy_full_precision_copy_is_charged_on_cuda(tmp_path, checkpoint, copy):
    ckpt, weight_bytes = checkpoint
    code = PYTHON_RUNTIME.replace("# COPY", COPIES[copy])
    loaded, after = resident(package(tmp_path / copy, ckpt, "python", code))
    assert loaded <= 1.05 * weight_bytes
    assert after >= 2.9 * weight_bytes  # bf16 weights + an fp32 copy (2x) wherever it lives


def test_decode_timing_on_cuda(tmp_path, checkpoint):
    ckpt, _ = checkpoint
    with SubmissionProcess(package(tmp_path / "hf", ckpt, "hf"), device="cuda", timeout_s=300) as proc:
        proc.load()
        timing = measure_decode(proc.generate, vocab_size=VOCAB, prompt_tokens=256, output_tokens=32, rounds=3,
                                requests_per_round=3, warmup=1, seed=0)
    assert len(timing.round_means_s) == 3 and timing.tps > 0
    print(f"CUDA decode: {timing.tps:.1f} tok/s (L = {timing.latency_s * 1e3:.2f} ms for 31 tokens)")
