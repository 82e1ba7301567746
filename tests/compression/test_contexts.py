import json

import pytest

from infbench.compression import contexts, corpus
from infbench.compression.corpus import Document
from infbench.errors import ConfigError


def _docs(family, n, length):
    return [Document(family, f"{family}:{i}", " ".join(f"w{i}_{k}" for k in range(length))) for i in range(n)]


def _tokenize(text):
    return [hash(w) % 1000 for w in text.split()]


def test_family_quotas_largest_remainder():
    assert contexts.family_quotas(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    assert contexts.family_quotas(256, {"web": 0.7, "code": 0.2, "math": 0.1}) == {"code": 51, "math": 26, "web": 179}


def _both_sets(docs, n, length, families, search_seed, verification_seed):
    search, quotas, _ = contexts.select_contexts(docs, _tokenize, n, length, families, search_seed, "search")
    verification, quotas_v, _ = contexts.select_contexts(
        docs, _tokenize, n, length, families, verification_seed, "verification", exclude=set(search["doc_id"])
    )
    assert quotas == quotas_v
    return search, verification, quotas


def test_sets_are_stratified_and_disjoint():
    docs = _docs("prose", 30, 50) + _docs("code", 30, 50) + _docs("short", 30, 3)
    search, verification, quotas = _both_sets(docs, 10, 20, {"prose": 3, "code": 2}, 0, 12345)
    assert quotas == {"code": 4, "prose": 6}
    for set_name, part in [("search", search), ("verification", verification)]:
        assert set(part["set"]) == {set_name}
        assert list(part["index"]) == list(range(10))
        assert part["family"].value_counts().to_dict() == {"prose": 6, "code": 4}
        assert part["doc_id"].is_unique
    assert set(search["doc_id"]).isdisjoint(verification["doc_id"])  # no document in both sets
    by_id = {d.doc_id: d for d in docs}
    for row in [*search.itertuples(), *verification.itertuples()]:
        assert len(row.token_ids) == 20
        assert list(row.token_ids) == _tokenize(by_id[row.doc_id].text)[row.offset : row.offset + 20]


def test_selection_is_deterministic_and_seeded():
    docs = _docs("prose", 40, 60) + _docs("code", 40, 60)
    a, _, _ = contexts.select_contexts(docs, _tokenize, 8, 16, "natural", 1, "search")
    b, _, _ = contexts.select_contexts(list(reversed(docs)), _tokenize, 8, 16, "natural", 1, "search")
    c, _, _ = contexts.select_contexts(docs, _tokenize, 8, 16, "natural", 2, "search")
    assert a.equals(b)
    assert not a.equals(c)


def test_too_small_corpus_names_the_key():
    docs = _docs("prose", 5, 50) + _docs("code", 30, 50)
    search, _, _ = contexts.select_contexts(docs, _tokenize, 8, 20, {"prose": 1, "code": 1}, 0, "search")
    with pytest.raises(ConfigError, match="likelihood.contexts_per_set.*'prose'.*outside the 8 documents"):
        contexts.select_contexts(
            docs, _tokenize, 8, 20, {"prose": 1, "code": 1}, 1, "verification", exclude=set(search["doc_id"])
        )


def test_unknown_family_names_the_key():
    with pytest.raises(ConfigError, match="likelihood.corpus.families"):
        contexts.select_contexts(_docs("prose", 5, 50), _tokenize, 2, 10, {"poetry": 1}, 0, "search")


def test_context_limit_names_the_keys():
    contexts.check_context_limit(512, 1536, 4096, "m")
    with pytest.raises(ConfigError, match=r"context_tokens \+ likelihood.continuation_tokens.*8192"):
        contexts.check_context_limit(8000, 256, 8192, "m")


def test_embedded_corpus_is_offline_and_hashed():
    spec = corpus.CorpusSpec(type="embedded")
    docs, digest = corpus.load_documents(spec, seed=0)
    families = {d.family for d in docs}
    assert families == {"reference_prose", "code"}
    assert len(docs) > 300 and len({d.doc_id for d in docs}) == len(docs)
    assert corpus.load_documents(spec, seed=0)[1] == digest


def test_datasets_corpus_reads_local_json(tmp_path):
    pytest.importorskip("datasets")
    rows = [{"id": f"d{i}", "text": f"text {i}", "source": "web" if i % 2 else "code"} for i in range(20)]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    spec = corpus.CorpusSpec(type="datasets", path="json", data_files=[str(path)], shuffle_buffer=5)
    docs, _ = corpus.load_documents(spec, seed=0)
    assert sorted(d.doc_id for d in docs) == sorted(r["id"] for r in rows)
    assert {d.family for d in docs} == {"web", "code"}
    bad = spec.model_copy(update={"family_field": "domain"})
    with pytest.raises(ConfigError, match="likelihood.corpus.family_field"):
        corpus.load_documents(bad, seed=0)
