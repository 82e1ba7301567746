"""Importance matrix of a source for llama.cpp's quantizer, in llama.cpp's imatrix format.

What llama.cpp's ``llama-imatrix`` collects (``tools/imatrix/imatrix.cpp``): for every matrix of a decoder
block, the sum over the calibration tokens of each input column's squared activation (``in_sum2``) and the
number of tokens (``counts``). Here the same sums come from forward pre-hooks on the transformers model's
``nn.Linear`` layers (the compiled tool is not part of the pinned environment, and transformers runs the
source on its own GPUs at paper scale), accumulated in float64. The GGUF tensor name of each layer is the
``gguf`` package's name map for the architecture, the one llama.cpp's converter uses; the output head is left
out, as ``llama-imatrix`` leaves it out by default.

The file is llama.cpp's GGUF imatrix format, as ``llama-imatrix`` writes it: key ``general.type = imatrix``,
``imatrix.datasets``, ``imatrix.chunk_count``, ``imatrix.chunk_size``; per matrix F32 tensors
``<name>.in_sum2`` (ne ``[n_cols, 1]``) and ``<name>.counts`` (ne ``[1, 1]``). :func:`weights` turns it into
what ``llama-quantize`` hands the quantizer (``tools/quantize/quantize.cpp::load_imatrix``): the mean squared
activation of each column, ``in_sum2 / counts``.

Matrices that no ``nn.Linear`` feeds (the 3-D expert tensors of a MoE model, whose transformers experts are
one fused module) get no entry; :func:`coverage` lists them, and llama.cpp refuses a type that requires an
imatrix for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.config.model import CorpusSpec, ImatrixSettings
from infbench.hashing import sha256_file
from infbench.provenance import Provenance

IN_SUM2, COUNTS = ".in_sum2", ".counts"


@dataclass
class Entry:
    """One matrix's statistics: per input column the sum of squared activations, and the tokens seen."""

    sums: np.ndarray  # float64 [n_cols]
    count: int = 0


def gguf_names(model, arch: str) -> dict[str, str]:
    """transformers module name -> GGUF weight name (``blk.N.attn_q.weight``) of every linear layer in a
    decoder block."""
    import gguf
    import torch

    arch_id = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch), None)
    if arch_id is None:
        raise ValueError(f"the gguf package knows no architecture '{arch}'")
    name_map = gguf.get_tensor_name_map(arch_id, model.config.num_hidden_layers)
    names = {}
    for module_name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            gguf_name = name_map.get_name(f"{module_name}.weight", try_suffixes=(".weight",))
            if gguf_name is not None and gguf_name.startswith("blk."):
                names[module_name] = gguf_name
    if not names:
        raise ValueError(f"no linear layer of the model maps to a GGUF block tensor of architecture '{arch}'")
    return names


def collect(model, names: dict[str, str], chunks: list[list[int]], batch_size: int = 1) -> dict[str, Entry]:
    """Run ``chunks`` (token ids, each its own sequence) through ``model``; the statistics per GGUF name."""
    import torch

    modules = dict(model.named_modules())
    entries = {g: Entry(np.zeros(modules[m].in_features)) for m, g in names.items()}
    sums = {
        g: torch.zeros(modules[m].in_features, dtype=torch.float64, device=modules[m].weight.device)
        for m, g in names.items()
    }
    counts = dict.fromkeys(names.values(), 0)

    def hook(gguf_name: str):
        def pre_hook(_module, args):
            x = args[0].detach().reshape(-1, args[0].shape[-1])
            sums[gguf_name] += x.double().square().sum(dim=0)
            counts[gguf_name] += x.shape[0]

        return pre_hook

    handles = [modules[m].register_forward_pre_hook(hook(g)) for m, g in names.items()]
    device = next(model.parameters()).device
    try:
        with torch.inference_mode():
            for start in range(0, len(chunks), batch_size):
                ids = torch.tensor(chunks[start : start + batch_size], dtype=torch.long, device=device)
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
    finally:
        for handle in handles:
            handle.remove()
    for g, entry in entries.items():
        entry.sums, entry.count = sums[g].cpu().numpy(), counts[g]
    return entries


def coverage(entries: dict[str, Entry], f16_gguf: str | Path) -> list[str]:
    """The block matrices of the GGUF file without an entry; raises when an entry's width is not its
    tensor's row width (the name map pointed at the wrong tensor)."""
    from infbench.gguf_reading import Reader

    tensors = {t.name: [int(n) for n in t.shape] for t in Reader(f16_gguf).tensors}
    for name, entry in entries.items():
        if name not in tensors:
            raise ValueError(f"{f16_gguf}: no tensor '{name}' for the imatrix entry of that name")
        if tensors[name][0] != entry.sums.size:
            raise ValueError(
                f"{f16_gguf}: tensor '{name}' has rows of {tensors[name][0]} columns, its imatrix "
                f"entry {entry.sums.size}"
            )
    return sorted(
        n
        for n, shape in tensors.items()
        if n.startswith("blk.") and n.endswith(".weight") and len(shape) >= 2 and n not in entries
    )


def write(
    path: str | Path, entries: dict[str, Entry], *, arch: str, chunk_count: int, chunk_size: int, datasets: list[str]
) -> None:
    """``entries`` in llama.cpp's GGUF imatrix format (module docstring), atomically."""
    import gguf

    with atomic.atomic_path(path) as tmp:
        writer = gguf.GGUFWriter(tmp, arch)
        writer.add_type(gguf.GGUFType.IMATRIX)
        writer.add_array(gguf.Keys.IMatrix.DATASETS, datasets)
        writer.add_uint32(gguf.Keys.IMatrix.CHUNK_COUNT, chunk_count)
        writer.add_uint32(gguf.Keys.IMatrix.CHUNK_SIZE, chunk_size)
        for name in sorted(entries):
            entry = entries[name]
            writer.add_tensor(name + IN_SUM2, entry.sums.astype(np.float32).reshape(1, -1))
            writer.add_tensor(name + COUNTS, np.array([[entry.count]], dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()


def weights(path: str | Path) -> dict[str, np.ndarray]:
    """The importance weights ``llama-quantize`` reads from a GGUF imatrix file: per matrix (and expert)
    ``in_sum2 / counts``, 1 where nothing was counted."""
    from infbench.gguf_reading import Reader

    tensors = {t.name: np.asarray(t.data, dtype=np.float32) for t in Reader(path).tensors}
    out = {}
    for key, sums in tensors.items():
        if not key.endswith(IN_SUM2):
            continue
        name = key.removesuffix(IN_SUM2)
        if name + COUNTS not in tensors:
            raise ValueError(f"{path}: '{key}' has no '{name}{COUNTS}'")
        counts = tensors[name + COUNTS].reshape(-1)
        per_expert = sums.reshape(counts.size, -1)
        mean = np.where(counts[:, None] > 0, per_expert / np.maximum(counts[:, None], 1), 1.0)
        out[name] = mean.astype(np.float32).reshape(-1)
    if not out:
        raise ValueError(f"{path}: no '*{IN_SUM2}' tensors: not a GGUF imatrix file")
    return out


class ImatrixRecord(BaseModel):
    """``results/compression/<source>/imatrix.json``: how the importance matrix was made."""

    source: str
    dataset: str  # the calibration set, as the file's imatrix.datasets names it
    corpus_sha256: str
    chunks: int
    chunk_tokens: int
    tokens: int
    dtype: str
    device: str
    entries: int
    uncovered: list[str]  # block matrices of the F16 twin without an entry (no nn.Linear feeds them)
    collect_s: float
    provenance: Provenance


def build(
    source: str,
    checkpoint: str,
    f16_gguf: str,
    out: str,
    record_out: str,
    *,
    settings: ImatrixSettings,
    likelihood_corpus: CorpusSpec,
    search_contexts: str,
    device: str,
    threads: int | None = None,
) -> ImatrixRecord:
    """The importance matrix of ``source`` (config ``compression.imatrix``) and its record."""
    import torch
    from transformers import AutoTokenizer

    from infbench.compression.baselines import calibration
    from infbench.gguf_reading import Reader
    from infbench.hf_loading import load_causal_lm

    if threads:
        torch.set_num_threads(threads)
    corpus = settings.corpus or likelihood_corpus
    shared = calibration.same_corpus(corpus, likelihood_corpus)
    docs, corpus_hash = calibration.documents(corpus, settings.seed, search_contexts if shared else None)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    chunks = calibration.chunks(docs, tokenizer, settings.chunks, settings.chunk_tokens, settings.seed)
    model = load_causal_lm(checkpoint, settings.dtype, device)
    arch = str(Reader(f16_gguf).fields["general.architecture"].contents())
    start = time.monotonic()
    entries = collect(model, gguf_names(model, arch), chunks)
    seconds = time.monotonic() - start
    uncovered = coverage(entries, f16_gguf)
    dataset = corpus.path or corpus.type
    if shared:
        dataset += " (the likelihood corpus), without the search contexts' documents"
    write(out, entries, arch=arch, chunk_count=len(chunks), chunk_size=settings.chunk_tokens, datasets=[dataset])
    record = ImatrixRecord(
        source=source,
        dataset=dataset,
        corpus_sha256=corpus_hash,
        chunks=len(chunks),
        chunk_tokens=settings.chunk_tokens,
        tokens=sum(map(len, chunks)),
        dtype=settings.dtype,
        device=str(next(model.parameters()).device),
        entries=len(entries),
        uncovered=uncovered,
        collect_s=round(seconds, 3),
        provenance=provenance.collect(
            {"settings": settings.model_dump(mode="json"), "device": device}, {"f16.gguf": sha256_file(f16_gguf)}
        ),
    )
    atomic.write_json(record_out, record.model_dump(mode="json"))
    return record
