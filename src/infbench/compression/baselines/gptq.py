"""Uniform GPTQ baseline through GPTQModel (PROTOCOL A6).

For a task limit ``C`` the width is the largest in ``bit_widths`` whose
package fits ``C``: each width's package size is first estimated from the
layer shapes (GPTQ format: packed ``qweight``, ``qzeros``, FP16 ``scales``,
``g_idx``), then the chosen width is quantized and its real package measured;
if it does not fit, the next width is tried. The tied embedding / output head
stays in the source precision (GPTQModel's ``lm_head=True`` would untie and
store it twice), so the space left for the decoder layers decides the width.
Group sizes that do not divide a layer's width leave a partial last group
(GPTQModel accepts any input width). Calibration: documents of the
configured corpus that no likelihood context uses.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from infbench.compression.baselines.package import copy_tokenizer, write_package
from infbench.compression.corpus import CorpusSpec, load_documents
from infbench.compression.submission import GIB, Manifest, package_bytes
from infbench.seeding import derive_seed

WEIGHTS = "model"


def _linear_shapes(checkpoint: Path) -> tuple[list[tuple[int, int]], int]:
    """(in, out) of every decoder linear layer, and the bytes of everything else."""
    from safetensors import safe_open

    linear, other = [], 0
    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(file, "pt") as f:
            for name in f.keys():
                shape = f.get_slice(name).get_shape()
                if ".layers." in name and name.endswith("proj.weight") and len(shape) == 2:
                    linear.append((shape[1], shape[0]))
                else:
                    other += math.prod(shape) * 2
    return linear, other


def estimate_bytes(checkpoint: Path, bits: int, group_size: int, extra_bytes: int) -> int:
    linear, other = _linear_shapes(checkpoint)
    total = other + extra_bytes
    for fan_in, fan_out in linear:
        groups = 1 if group_size <= 0 else math.ceil(fan_in / group_size)
        total += fan_in * fan_out * bits // 8          # qweight
        total += groups * fan_out * bits // 8          # qzeros
        total += groups * fan_out * 2                  # fp16 scales
        total += fan_in * 4                            # g_idx
    return total


def calibration_texts(corpus: dict, contexts_parquet: str, tokenizer, samples: int, tokens: int,
                      seed: int) -> list[list[int]]:
    """``samples`` windows of ``tokens`` tokens from documents no likelihood context uses."""
    used = set(pq.read_table(contexts_parquet, columns=["doc_id"]).column("doc_id").to_pylist())
    docs, _ = load_documents(CorpusSpec.model_validate(corpus), seed)
    rng = np.random.default_rng(derive_seed(seed, "gptq-calibration"))
    out = []
    for i in rng.permutation(len(docs)):
        if docs[i].doc_id in used:
            continue
        ids = tokenizer(docs[i].text, add_special_tokens=False)["input_ids"]
        if len(ids) >= tokens:
            start = int(rng.integers(0, len(ids) - tokens + 1))
            out.append(ids[start:start + tokens])
        if len(out) == samples:
            return out
    raise ValueError(f"only {len(out)} calibration windows of {tokens} tokens outside the likelihood sets "
                     f"(compression.gptq.calibration_samples = {samples})")


def choose_bits(checkpoint: Path, limit_gib: float, bit_widths: list[int], group_size: int,
                extra_bytes: int) -> list[int]:
    """Widths to try, largest first, starting at the largest whose estimate fits."""
    widths = sorted(bit_widths, reverse=True)
    fitting = [b for b in widths if estimate_bytes(checkpoint, b, group_size, extra_bytes) <= limit_gib * GIB]
    return fitting or widths[-1:]


def quantize(checkpoint: Path, out: Path, bits: int, *, group_size: int, damp_percent: float, act_order: bool,
             calibration: list[list[int]]) -> None:
    # GPTQModel sizes its CPU pool as ceil(cores / 2) but its model loader asks
    # for two workers, which fails on a 2-core machine.
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(max(2, os.cpu_count() or 1)))
    from gptqmodel import BACKEND, GPTQModel, QuantizeConfig

    cfg = QuantizeConfig(bits=bits, group_size=group_size, desc_act=act_order, sym=True,
                         damp_percent=damp_percent, true_sequential=True, lm_head=False, fallback=None)
    model = GPTQModel.load(str(checkpoint), cfg, device="cpu")
    model.quantize([{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in calibration], batch_size=1,
                   backend=BACKEND.TORCH)
    model.save(str(out))


def package(checkpoint: str | Path, source: str, limit_gib: float, out_dir: str | Path, *, corpus: dict,
            contexts_parquet: str, bit_widths: list[int], group_size: int, damp_percent: float, act_order: bool,
            calibration_samples: int, calibration_tokens: int, calibration_seed: int) -> dict:
    from transformers import AutoTokenizer

    checkpoint = Path(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    calibration = calibration_texts(corpus, contexts_parquet, tokenizer, calibration_samples,
                                    calibration_tokens, calibration_seed)
    extra = sum(p.stat().st_size for p in checkpoint.iterdir() if p.name.startswith("tokenizer"))
    tried = []
    for bits in choose_bits(checkpoint, limit_gib, bit_widths, group_size, extra):
        info = {"bits": bits, "group_size": group_size, "damp_percent": damp_percent, "act_order": act_order,
                "calibration_samples": calibration_samples, "calibration_tokens": calibration_tokens,
                "estimated_bytes": estimate_bytes(checkpoint, bits, group_size, extra)}
        manifest = Manifest(name=f"gptq-{bits}bit", source=source, runtime="hf", weights=WEIGHTS,
                            tokenizer=WEIGHTS, description=f"uniform GPTQ {bits}-bit, group {group_size}")

        def fill(tmp: Path, bits=bits, info=info) -> None:
            quantize(checkpoint, tmp / WEIGHTS, bits, group_size=group_size, damp_percent=damp_percent,
                     act_order=act_order, calibration=calibration)
            copy_tokenizer(checkpoint, tmp / WEIGHTS)
            (tmp / "gptq_baseline.json").write_text(json.dumps(info, indent=2))

        write_package(out_dir, manifest, fill)
        info["package_bytes"] = package_bytes(out_dir)
        tried.append(info)
        if info["package_bytes"] <= limit_gib * GIB:
            break
        if bits != min(bit_widths):
            shutil.rmtree(out_dir)
    return {"chosen": tried[-1], "tried": tried}
