"""Calibration text for the importance matrix (config ``compression.imatrix``).

As ``llama-imatrix`` reads its calibration file: one stream of tokens cut into consecutive chunks of
``chunk_tokens``. The stream is the documents of a corpus in an order drawn from the seed, each tokenized
alone, separated by the tokens of a blank line. The corpus is ``compression.imatrix.corpus`` (the paper
profiles: WikiText-103, one of the calibration sets PROTOCOL A7 offers); when that is the likelihood corpus
(the embedded default), without the documents any search context uses, as the GPTQ baseline's calibration.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from infbench.compression.corpus import Document, load_documents
from infbench.config.model import CorpusSpec
from infbench.errors import ConfigError
from infbench.seeding import derive_seed

SEPARATOR = "\n\n"
KEY = "compression.imatrix.corpus"


def same_corpus(a: CorpusSpec, b: CorpusSpec) -> bool:
    """Whether two corpus specs read the same documents (family weights only stratify the likelihood sets)."""
    return a.model_copy(update={"families": "natural"}) == b.model_copy(update={"families": "natural"})


def documents(corpus: CorpusSpec, seed: int, search_contexts: str | None = None) -> tuple[list[Document], str]:
    """The corpus's documents, less those of ``search_contexts`` (a contexts parquet) when given; the corpus
    hash."""
    docs, corpus_hash = load_documents(corpus, seed, KEY)
    if search_contexts is not None:
        used = set(pq.read_table(search_contexts, columns=["doc_id"]).column("doc_id").to_pylist())
        docs = [d for d in docs if d.doc_id not in used]
    return docs, corpus_hash


def chunks(docs: list[Document], tokenizer, n_chunks: int, chunk_tokens: int, seed: int) -> list[list[int]]:
    """``n_chunks`` consecutive chunks of ``chunk_tokens`` tokens from the documents in a seeded order."""
    need = n_chunks * chunk_tokens
    separator = tokenizer(SEPARATOR, add_special_tokens=False)["input_ids"]
    stream: list[int] = []
    for i in np.random.default_rng(derive_seed(seed, "imatrix-calibration")).permutation(len(docs)):
        stream += tokenizer(docs[i].text, add_special_tokens=False)["input_ids"] + separator
        if len(stream) >= need:
            return [stream[k * chunk_tokens : (k + 1) * chunk_tokens] for k in range(n_chunks)]
    raise ConfigError(
        "compression.imatrix.chunks",
        f"the calibration documents hold {len(stream)} tokens, fewer than {n_chunks} chunks of {chunk_tokens}",
    )
