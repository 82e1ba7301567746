"""Likelihood context sets: N contexts of L tokens per set, stratified by
source family with the same family proportions in every set, each context
from its own document and no document shared between sets (PROTOCOL A3).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.compression.corpus import CorpusSpec, Document, load_documents
from infbench.errors import ConfigError
from infbench.seeding import derive_seed

SET_NAMES = ("search", "verification")

CONTEXTS_SCHEMA = pa.schema([
    ("set", pa.string()),
    ("index", pa.int32()),
    ("family", pa.string()),
    ("doc_id", pa.string()),
    ("offset", pa.int64()),
    ("token_ids", pa.list_(pa.int32())),
])


class ContextSetsManifest(BaseModel):
    """``contexts.json`` beside ``contexts.parquet``."""

    source: str
    sets: list[str]
    contexts_per_set: int
    context_tokens: int
    quotas: dict[str, int]
    corpus_type: str
    corpus_hash: str
    corpus_documents: int
    eligible_seen: dict[str, int]
    seed: int
    provenance: provenance.Provenance


def family_quotas(n: int, weights: dict[str, float]) -> dict[str, int]:
    """Split ``n`` over families by weight, largest remainder first (ties by name)."""
    total = float(sum(weights.values()))
    if total <= 0:
        raise ConfigError("likelihood.corpus.families", "family weights must sum to more than 0")
    exact = {f: n * w / total for f, w in weights.items()}
    quotas = {f: math.floor(x) for f, x in exact.items()}
    left = n - sum(quotas.values())
    for f in sorted(exact, key=lambda f: (-(exact[f] - quotas[f]), f))[:left]:
        quotas[f] += 1
    return {f: q for f, q in sorted(quotas.items()) if q > 0}


def select_contexts(docs: list[Document], tokenize, n_per_set: int, length: int,
                    families: dict[str, float] | str, seed: int,
                    set_names: tuple[str, ...] = SET_NAMES) -> tuple[pd.DataFrame, dict, dict]:
    """Rows of every set, the per-set family quotas, and eligible documents seen per family."""
    by_family: dict[str, list[Document]] = {}
    for d in sorted(docs, key=lambda d: (d.family, d.doc_id)):
        by_family.setdefault(d.family, []).append(d)
    if families == "natural":
        weights = {f: float(len(ds)) for f, ds in by_family.items()}
    else:
        missing = sorted(set(families) - set(by_family))
        if missing:
            raise ConfigError("likelihood.corpus.families",
                              f"families {missing} have no documents in the corpus (it has {sorted(by_family)})")
        weights = dict(families)
    quotas = family_quotas(n_per_set, weights)
    rows, seen = [], {}
    for family, quota in quotas.items():
        need = quota * len(set_names)
        rng = np.random.default_rng(derive_seed(seed, "contexts", family))
        picked, eligible = [], 0
        for i in rng.permutation(len(by_family[family])):
            doc = by_family[family][i]
            ids = tokenize(doc.text)
            if len(ids) < length:
                continue
            eligible += 1
            offset = int(rng.integers(0, len(ids) - length + 1))
            picked.append((doc, offset, ids[offset:offset + length]))
            if len(picked) == need:
                break
        seen[family] = eligible
        if len(picked) < need:
            raise ConfigError(
                "likelihood.contexts_per_set",
                f"the corpus has {len(picked)} documents of family '{family}' with at least "
                f"{length} tokens; {len(set_names)} disjoint sets of {quota} need {need} "
                "(lower likelihood.contexts_per_set or likelihood.context_tokens, or use a larger corpus)",
            )
        for k, (doc, offset, ids) in enumerate(picked):
            rows.append({"set": set_names[k % len(set_names)], "family": family, "doc_id": doc.doc_id,
                         "offset": offset, "token_ids": [int(t) for t in ids]})
    table = pd.DataFrame(rows)
    table["index"] = table.groupby("set").cumcount().astype("int32")
    table = table.sort_values(["set", "index"]).reset_index(drop=True)
    return table[[f.name for f in CONTEXTS_SCHEMA]], quotas, seen


def check_context_limit(context_tokens: int, continuation_tokens: int, limit: int, source: str) -> None:
    if context_tokens + continuation_tokens > limit:
        raise ConfigError(
            "likelihood.context_tokens + likelihood.continuation_tokens",
            f"{context_tokens} + {continuation_tokens} = {context_tokens + continuation_tokens} tokens "
            f"exceeds the context limit of source '{source}' ({limit} tokens)",
        )


def build(source: str, tokenizer_dir: str | Path, source_record: str | Path, out_parquet: str | Path,
          out_manifest: str | Path, *, corpus: dict[str, Any], contexts_per_set: int, context_tokens: int,
          continuation_tokens: int, seed: int) -> ContextSetsManifest:
    from transformers import AutoTokenizer

    from infbench.sources import read_record

    record = read_record(source_record)
    check_context_limit(context_tokens, continuation_tokens, record.max_position_embeddings, source)
    spec = CorpusSpec.model_validate(corpus)
    docs, corpus_hash = load_documents(spec, seed)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

    def tokenize(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    table, quotas, seen = select_contexts(docs, tokenize, contexts_per_set, context_tokens, spec.families, seed)
    atomic.write_parquet(out_parquet, table, CONTEXTS_SCHEMA)
    manifest = ContextSetsManifest(
        source=source, sets=list(SET_NAMES), contexts_per_set=contexts_per_set, context_tokens=context_tokens,
        quotas=quotas, corpus_type=spec.type, corpus_hash=corpus_hash, corpus_documents=len(docs),
        eligible_seen=seen, seed=seed,
        provenance=provenance.collect(
            {"corpus": corpus, "contexts_per_set": contexts_per_set, "context_tokens": context_tokens,
             "seed": seed},
            {"source.json": record.files.get("tokenizer.json", "")}),
    )
    atomic.write_json(out_manifest, manifest.model_dump(mode="json"))
    return manifest


def read_contexts(path: str | Path, set_name: str) -> pd.DataFrame:
    table = pq.read_table(path, filters=[("set", "=", set_name)]).to_pandas()
    if table.empty:
        raise ConfigError("likelihood.sets", f"{path} has no contexts for set '{set_name}'")
    return table.sort_values("index").reset_index(drop=True)
