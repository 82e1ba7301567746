"""Uniform GPTQ baseline through GPTQModel (PROTOCOL A6).

For a task limit ``C`` the width is the largest in ``bit_widths`` whose
package fits ``C``, with the output head's precision adjusted to the space
left: at each width (largest first) the head stays in the source precision if
that fits, else, when the head is its own tensor, it is GPTQ-quantized at the
same width (GPTQModel ``lm_head=True``). A tied embedding / output head always
stays in the source precision (quantizing the head would untie it and store
the matrix twice), and the input embedding is a lookup GPTQ does not quantize.
Each plan's package size is first estimated from the tensor shapes (GPTQ
format: packed ``qweight``, ``qzeros``, FP16 ``scales``, ``g_idx``), then the
first plan that fits is quantized and its real package measured; if it does
not fit, the next plan is tried.
Group sizes that do not divide a layer's width leave a partial last group
(GPTQModel accepts any input width). Calibration: documents of the
configured corpus that no search context uses.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow.parquet as pq

from infbench.compression.baselines.package import copy_tokenizer, write_package
from infbench.compression.corpus import load_documents
from infbench.compression.submission import GIB, Manifest
from infbench.config.model import CorpusSpec, GptqVariant
from infbench.package_files import package_bytes
from infbench.seeding import derive_seed

WEIGHTS = "model"


HEAD = "lm_head.weight"


class Shapes(NamedTuple):
    linear: list[tuple[int, int]]  # (in, out) of every decoder linear layer
    head: tuple[int, int] | None  # (in, out) of a separate (untied) output head
    other_bytes: int  # everything else, in the source's 16-bit precision


def tensor_shapes(checkpoint: Path) -> Shapes:
    from safetensors import safe_open

    linear, head, other = [], None, 0
    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(file, "pt") as f:
            for name in f.keys():
                shape = f.get_slice(name).get_shape()
                if ".layers." in name and name.endswith("proj.weight") and len(shape) == 2:
                    linear.append((shape[1], shape[0]))
                elif name == HEAD:
                    head = (shape[1], shape[0])
                else:
                    other += math.prod(shape) * 2
    return Shapes(linear, head, other)


def _quantized_bytes(fan_in: int, fan_out: int, bits: int, group_size: int) -> int:
    groups = 1 if group_size <= 0 else math.ceil(fan_in / group_size)
    return (
        fan_in * fan_out * bits // 8  # qweight
        + groups * fan_out * bits // 8  # qzeros
        + groups * fan_out * 2  # fp16 scales
        + fan_in * 4
    )  # g_idx


def estimate_bytes(shapes: Shapes, bits: int, group_size: int, extra_bytes: int, quantize_head: bool = False) -> int:
    total = shapes.other_bytes + extra_bytes + sum(_quantized_bytes(i, o, bits, group_size) for i, o in shapes.linear)
    if shapes.head:
        total += _quantized_bytes(*shapes.head, bits, group_size) if quantize_head else math.prod(shapes.head) * 2
    return total


def calibration_texts(
    corpus: CorpusSpec, contexts_parquet: str, tokenizer, samples: int, tokens: int, seed: int
) -> list[list[int]]:
    """``samples`` windows of ``tokens`` tokens from documents no search context uses (the verification
    set is the operator's secret: the baseline knows no more of it than a submitter)."""
    used = set(pq.read_table(contexts_parquet, columns=["doc_id"]).column("doc_id").to_pylist())
    docs, _ = load_documents(corpus, seed)
    rng = np.random.default_rng(derive_seed(seed, "gptq-calibration"))
    out = []
    for i in rng.permutation(len(docs)):
        if docs[i].doc_id in used:
            continue
        ids = tokenizer(docs[i].text, add_special_tokens=False)["input_ids"]
        if len(ids) >= tokens:
            start = int(rng.integers(0, len(ids) - tokens + 1))
            out.append(ids[start : start + tokens])
        if len(out) == samples:
            return out
    raise ValueError(
        f"only {len(out)} calibration windows of {tokens} tokens outside the search set "
        f"(compression.gptq.calibration_samples = {samples})"
    )


def plans(
    shapes: Shapes, limit_gib: float, bit_widths: list[int], group_size: int, extra_bytes: int
) -> list[tuple[int, bool]]:
    """(width, quantize the head) to try in order: widest first, the head in source precision before a
    quantized head (only a separate head can be), starting at the first whose estimate fits."""
    order = [(b, q) for b in sorted(bit_widths, reverse=True) for q in ((False, True) if shapes.head else (False,))]
    fits = [estimate_bytes(shapes, b, group_size, extra_bytes, q) <= limit_gib * GIB for b, q in order]
    return order[fits.index(True) :] if any(fits) else order[-1:]


def quantize(
    checkpoint: Path,
    out: Path,
    bits: int,
    *,
    group_size: int,
    damp_percent: float,
    act_order: bool,
    calibration: list[list[int]],
    quantize_head: bool = False,
    layer_bits: dict[int, int] | None = None,
) -> None:
    """``layer_bits``: decoder layer index -> its width where it is not ``bits`` (GPTQModel's ``dynamic``)."""
    # GPTQModel sizes its CPU pool as ceil(cores / 2) but its model loader asks
    # for two workers, which fails on a 2-core machine.
    os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(max(2, os.cpu_count() or 1)))
    from gptqmodel import BACKEND, GPTQModel, QuantizeConfig

    widths = sorted(set((layer_bits or {}).values()))
    dynamic = {
        rf"+:(.*\.)?layers\.({'|'.join(str(i) for i, b in layer_bits.items() if b == width)})\.": {"bits": width}
        for width in widths
    }
    cfg = QuantizeConfig(
        bits=bits,
        group_size=group_size,
        desc_act=act_order,
        sym=True,
        damp_percent=damp_percent,
        true_sequential=True,
        lm_head=quantize_head,
        fallback=None,
        dynamic=dynamic or None,
    )
    model = GPTQModel.load(str(checkpoint), cfg, device="cpu")
    model.quantize(
        [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in calibration],
        batch_size=1,
        backend=BACKEND.TORCH,
    )
    model.save(str(out))


def _write(out_dir: Path, checkpoint: Path, manifest: Manifest, info: dict, bits: int, **quantize_kwargs) -> None:
    """A GPTQ package at ``out_dir``: the quantized checkpoint, the source's tokenizer and ``info``."""

    def fill(tmp: Path) -> None:
        quantize(checkpoint, tmp / WEIGHTS, bits, **quantize_kwargs)
        copy_tokenizer(checkpoint, tmp / WEIGHTS)
        (tmp / "gptq_baseline.json").write_text(json.dumps(info, indent=2))

    write_package(out_dir, manifest, fill)


def package(
    checkpoint: str | Path,
    source: str,
    limit_gib: float,
    out_dir: str | Path,
    *,
    corpus: CorpusSpec,
    contexts_parquet: str,
    bit_widths: list[int],
    group_size: int,
    damp_percent: float,
    act_order: bool,
    calibration_samples: int,
    calibration_tokens: int,
    calibration_seed: int,
) -> dict:
    from transformers import AutoTokenizer

    checkpoint = Path(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    calibration = calibration_texts(
        corpus, contexts_parquet, tokenizer, calibration_samples, calibration_tokens, calibration_seed
    )
    extra = sum(p.stat().st_size for p in checkpoint.iterdir() if p.name.startswith("tokenizer"))
    shapes = tensor_shapes(checkpoint)
    tried = []
    candidates = plans(shapes, limit_gib, bit_widths, group_size, extra)
    for bits, quantize_head in candidates:
        head = (
            "none (tied to the embedding)"
            if shapes.head is None
            else (f"GPTQ {bits}-bit" if quantize_head else "source precision")
        )
        info = {
            "bits": bits,
            "head": head,
            "group_size": group_size,
            "damp_percent": damp_percent,
            "act_order": act_order,
            "calibration_samples": calibration_samples,
            "calibration_tokens": calibration_tokens,
            "estimated_bytes": estimate_bytes(shapes, bits, group_size, extra, quantize_head),
        }
        manifest = Manifest(
            name=f"gptq-{bits}bit",
            source=source,
            runtime="hf",
            weights=WEIGHTS,
            tokenizer=WEIGHTS,
            description=f"uniform GPTQ {bits}-bit, group {group_size}, output head: {head}",
        )

        _write(
            out_dir,
            checkpoint,
            manifest,
            info,
            bits,
            group_size=group_size,
            damp_percent=damp_percent,
            act_order=act_order,
            calibration=calibration,
            quantize_head=quantize_head,
        )
        info["package_bytes"] = package_bytes(out_dir)
        tried.append(info)
        if info["package_bytes"] <= limit_gib * GIB:
            break
        if (bits, quantize_head) != candidates[-1]:
            shutil.rmtree(out_dir)
    return {"chosen": tried[-1], "tried": tried}


def middle_layers(n_layers: int, share: float) -> list[int]:
    """The ``round(share * n_layers)`` decoder layers in the middle of the stack (at least one)."""
    count = max(1, round(share * n_layers))
    first = (n_layers - count) // 2
    return list(range(first, first + count))


def variant_package(
    checkpoint: str | Path,
    source: str,
    out_dir: str | Path,
    *,
    variant: GptqVariant,
    corpus: CorpusSpec,
    contexts_parquet: str,
    group_size: int,
    damp_percent: float,
    act_order: bool,
    calibration_samples: int,
    calibration_tokens: int,
    calibration_seed: int,
) -> dict:
    """A GPTQ package of fixed widths (config ``compression.gptq.variants``; what a variant leaves out takes
    the ``compression.gptq`` value given here); the output head stays in the source precision."""
    from transformers import AutoConfig, AutoTokenizer

    checkpoint = Path(checkpoint)
    group_size = variant.group_size if variant.group_size is not None else group_size
    damp_percent = variant.damp_percent if variant.damp_percent is not None else damp_percent
    act_order = variant.act_order if variant.act_order is not None else act_order
    layer_bits = {}
    if variant.low_bits is not None:
        n_layers = AutoConfig.from_pretrained(checkpoint).num_hidden_layers
        layer_bits = dict.fromkeys(middle_layers(n_layers, variant.low_bits_share), variant.low_bits)
    calibration = calibration_texts(
        corpus,
        contexts_parquet,
        AutoTokenizer.from_pretrained(checkpoint),
        calibration_samples,
        calibration_tokens,
        calibration_seed,
    )
    widths = f"{variant.bits}-bit"
    if layer_bits:
        widths += f", {variant.low_bits}-bit in decoder layers {min(layer_bits)}-{max(layer_bits)}"
    info = {
        "name": variant.name,
        "bits": variant.bits,
        "layer_bits": layer_bits,
        "group_size": group_size,
        "damp_percent": damp_percent,
        "act_order": act_order,
        "head": "source precision",
        "calibration_samples": calibration_samples,
        "calibration_tokens": calibration_tokens,
    }
    manifest = Manifest(
        name=f"gptq-{variant.name}",
        source=source,
        runtime="hf",
        weights=WEIGHTS,
        tokenizer=WEIGHTS,
        description=f"GPTQ {widths}, group {group_size}, damping {damp_percent}",
    )

    _write(
        out_dir,
        checkpoint,
        manifest,
        info,
        variant.bits,
        group_size=group_size,
        damp_percent=damp_percent,
        act_order=act_order,
        calibration=calibration,
        layer_bits=layer_bits,
    )
    return {**info, "package_bytes": package_bytes(out_dir)}
