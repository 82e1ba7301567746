"""Likelihood context sets: N contexts of L tokens per set, stratified by
source family with the same family quotas in every set, each context from its
own document and no document shared between sets (PROTOCOL A3).

The search set is drawn first, from the public config seed
(``likelihood.context_seed``), so a submitter can rebuild it. The verification
set is drawn afterwards from the documents the search set left, by a seed only
the operator's secret gives (:mod:`infbench.compression.held_out`).

Files (per source and set): ``<set>/contexts.parquet`` (``set, index, family,
doc_id, offset, token_ids``) and ``<set>/contexts.json``
(:class:`ContextSetsManifest`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from infbench import atomic, provenance
from infbench.compression import held_out
from infbench.compression.corpus import Document, load_documents
from infbench.config.model import CorpusSpec
from infbench.errors import ConfigError
from infbench.hashing import sha256_file
from infbench.operator_secret import OperatorSecret
from infbench.seeding import derive_seed

SET_NAMES = (held_out.SEARCH, held_out.VERIFICATION)  # drawn in this order

CONTEXTS_SCHEMA = pa.schema(
    [
        ("set", pa.string()),
        ("index", pa.int32()),
        ("family", pa.string()),
        ("doc_id", pa.string()),
        ("offset", pa.int64()),
        ("token_ids", pa.list_(pa.int32())),
    ]
)


class ContextSetsManifest(BaseModel):
    """``<set>/contexts.json`` beside ``<set>/contexts.parquet``."""

    source: str
    set: str
    contexts_per_set: int
    context_tokens: int
    quotas: dict[str, int]
    corpus_type: str
    corpus_hash: str
    corpus_documents: int
    excluded_documents: int  # documents of sets drawn before (the search set's, for verification)
    eligible_seen: dict[str, int]
    seed: int  # likelihood.context_seed
    secret_label: str | None  # verification: the operator secret the draw came from; search: None (public seed)
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


def select_contexts(
    docs: list[Document],
    tokenize,
    n: int,
    length: int,
    families: dict[str, float] | str,
    seed: int,
    set_name: str,
    exclude: set[str] = frozenset(),
) -> tuple[pd.DataFrame, dict, dict]:
    """Rows of one set, its family quotas, and eligible documents seen per family.

    Documents in ``exclude`` (the sets drawn before) are never drawn; quotas come
    from the whole corpus, so every set gets the same ones.
    """
    by_family: dict[str, list[Document]] = {}
    for d in sorted(docs, key=lambda d: (d.family, d.doc_id)):
        by_family.setdefault(d.family, []).append(d)
    if families == "natural":
        weights = {f: float(len(ds)) for f, ds in by_family.items()}
    else:
        missing = sorted(set(families) - set(by_family))
        if missing:
            raise ConfigError(
                "likelihood.corpus.families",
                f"families {missing} have no documents in the corpus (it has {sorted(by_family)})",
            )
        weights = dict(families)
    quotas = family_quotas(n, weights)
    rows, seen = [], {}
    for family, quota in quotas.items():
        rng = np.random.default_rng(derive_seed(seed, "contexts", family))
        candidates = [d for d in by_family[family] if d.doc_id not in exclude]
        picked, eligible = [], 0
        for i in rng.permutation(len(candidates)):
            doc = candidates[i]
            ids = tokenize(doc.text)
            if len(ids) < length:
                continue
            eligible += 1
            offset = int(rng.integers(0, len(ids) - length + 1))
            picked.append((doc, offset, ids[offset : offset + length]))
            if len(picked) == quota:
                break
        seen[family] = eligible
        if len(picked) < quota:
            left = f" outside the {len(exclude)} documents of the sets drawn before" if exclude else ""
            raise ConfigError(
                "likelihood.contexts_per_set",
                f"the corpus has {len(picked)} documents of family '{family}' with at least {length} tokens{left}; "
                f"the {set_name} set needs {quota} (every set needs its own documents: lower "
                "likelihood.contexts_per_set or likelihood.context_tokens, or use a larger corpus)",
            )
        for doc, offset, ids in picked:
            rows.append(
                {
                    "set": set_name,
                    "family": family,
                    "doc_id": doc.doc_id,
                    "offset": offset,
                    "token_ids": [int(t) for t in ids],
                }
            )
    table = pd.DataFrame(rows)
    table["index"] = np.arange(len(table), dtype="int32")
    return table[[f.name for f in CONTEXTS_SCHEMA]], quotas, seen


def check_context_limit(context_tokens: int, continuation_tokens: int, limit: int, source: str) -> None:
    if context_tokens + continuation_tokens > limit:
        raise ConfigError(
            "likelihood.context_tokens + likelihood.continuation_tokens",
            f"{context_tokens} + {continuation_tokens} = {context_tokens + continuation_tokens} tokens "
            f"exceeds the context limit of source '{source}' ({limit} tokens)",
        )


def build(
    source: str,
    tokenizer_dir: str | Path,
    source_record: str | Path,
    out_parquet: str | Path,
    out_manifest: str | Path,
    *,
    set_name: str,
    corpus: CorpusSpec,
    contexts_per_set: int,
    context_tokens: int,
    continuation_tokens: int,
    seed: int,
    secret: OperatorSecret | None = None,
    search_contexts: str | Path | None = None,
) -> ContextSetsManifest:
    """One set's contexts: search from the public ``seed``; verification from ``secret``, outside
    the documents of ``search_contexts``."""
    from transformers import AutoTokenizer

    from infbench.sources import read_record

    record = read_record(source_record)
    check_context_limit(context_tokens, continuation_tokens, record.max_position_embeddings, source)
    spec = corpus
    docs, corpus_hash = load_documents(spec, seed)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

    def tokenize(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    inputs = {"source.json": record.files.get("tokenizer.json", "")}
    if set_name == held_out.SEARCH:
        draw_seed, exclude = seed, set()
    elif secret is None or search_contexts is None:
        raise ValueError("the verification set is drawn from the operator secret, after the search set")
    else:
        draw_seed = held_out.context_seed(secret, source, seed)
        exclude = set(pq.read_table(search_contexts, columns=["doc_id"]).column("doc_id").to_pylist())
        inputs["search contexts.parquet"] = sha256_file(search_contexts)
    table, quotas, seen = select_contexts(
        docs, tokenize, contexts_per_set, context_tokens, spec.families, draw_seed, set_name, exclude
    )
    atomic.write_parquet(out_parquet, table, CONTEXTS_SCHEMA)
    manifest = ContextSetsManifest(
        source=source,
        set=set_name,
        contexts_per_set=contexts_per_set,
        context_tokens=context_tokens,
        quotas=quotas,
        corpus_type=spec.type,
        corpus_hash=corpus_hash,
        corpus_documents=len(docs),
        excluded_documents=len(exclude),
        eligible_seen=seen,
        seed=seed,
        secret_label=secret.label if set_name == held_out.VERIFICATION else None,
        provenance=provenance.collect(
            {
                "set": set_name,
                "corpus": spec.model_dump(mode="json"),
                "contexts_per_set": contexts_per_set,
                "context_tokens": context_tokens,
                "seed": seed,
                "secret": secret.public() if set_name == held_out.VERIFICATION else None,
            },
            inputs,
        ),
    )
    atomic.write_json(out_manifest, manifest.model_dump(mode="json"))
    return manifest


def read_contexts(path: str | Path, set_name: str) -> pd.DataFrame:
    table = pq.read_table(path, filters=[("set", "=", set_name)]).to_pandas()
    if table.empty:
        raise ConfigError("likelihood.sets", f"{path} has no contexts for set '{set_name}'")
    return table.sort_values("index").reset_index(drop=True)
