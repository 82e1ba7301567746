"""Text corpora that the likelihood context sets are drawn from.

``embedded``: documents that ship with every CPython 3.11 install, so the
embedded default runs offline on any machine. Two source families:

- ``reference_prose``: the Python language reference and library topics that
  ``pydoc`` serves (``pydoc_data.topics``), one document per topic;
- ``code``: the standard library's own Python modules (``Lib/**/*.py``,
  tests, ``site-packages`` and ``idlelib`` excluded), one document per file.

``datasets``: any corpus the ``datasets`` library loads (the paper profile:
Dolma 3 Dolmino from the hub), streamed, with a field naming each document's
source family (or none: a calibration set such as WikiText-103 is one family).

The corpus hash (sha256 over family, id and text of every document read)
goes into the context-set manifest, so a different Python build shows up.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from infbench.config.model import CorpusSpec
from infbench.errors import ConfigError


@dataclass(frozen=True)
class Document:
    family: str
    doc_id: str
    text: str


_EXCLUDED_CODE_DIRS = {"test", "tests", "site-packages", "idlelib", "lib2to3", "__pycache__"}


def _embedded_documents() -> Iterable[Document]:
    import pydoc_data.topics

    for topic in sorted(pydoc_data.topics.topics):
        yield Document("reference_prose", f"pydoc:{topic}", pydoc_data.topics.topics[topic])
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.rglob("*.py")):
        rel = path.relative_to(stdlib)
        if _EXCLUDED_CODE_DIRS.intersection(rel.parts[:-1]):
            continue
        yield Document("code", f"stdlib:{rel.as_posix()}", path.read_text(encoding="utf-8", errors="replace"))


def _datasets_documents(spec: CorpusSpec, seed: int, key: str) -> Iterable[Document]:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"{key}.type", "'datasets' corpora need the datasets package (pip install datasets)"
        ) from None
    if not spec.path:
        raise ConfigError(f"{key}.path", "a datasets corpus needs 'path'")
    stream = datasets.load_dataset(spec.path, spec.name, split=spec.split, data_files=spec.data_files, streaming=True)
    stream = stream.shuffle(seed=seed, buffer_size=spec.shuffle_buffer)
    for i, row in enumerate(stream):
        if i >= spec.max_documents:
            break
        for name, field in (("text_field", spec.text_field), ("family_field", spec.family_field)):
            if field is not None and field not in row:
                raise ConfigError(f"{key}.{name}", f"field '{field}' is not in the corpus rows (fields: {sorted(row)})")
        doc_id = str(row[spec.id_field]) if spec.id_field and spec.id_field in row else f"row:{i}"
        family = str(row[spec.family_field]) if spec.family_field is not None else spec.path
        yield Document(family, doc_id, row[spec.text_field])


def load_documents(spec: CorpusSpec, seed: int, key: str = "likelihood.corpus") -> tuple[list[Document], str]:
    """All documents read from the corpus (config ``key``), and the corpus hash."""
    docs = list(_embedded_documents() if spec.type == "embedded" else _datasets_documents(spec, seed, key))
    h = hashlib.sha256()
    for d in docs:
        for part in (d.family, d.doc_id, d.text):
            h.update(part.encode())
            h.update(b"\0")
    return docs, h.hexdigest()
