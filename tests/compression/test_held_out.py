"""What CompressionBench draws from the operator secret, and what stays on the public seeds."""

import json

import pyarrow.parquet as pq
import pytest

from infbench import operator_secret
from infbench.compression import contexts, held_out
from infbench.config.model import CorpusSpec
from infbench.errors import ConfigError
from infbench.evaluation.questions import load_questions

DEMO = operator_secret.load({"env": "INFBENCH_TEST_NO_SUCH_VARIABLE", "file": None, "require": False})


def _secret(name: str):
    value = f"operator-secret-of-round-{name}"
    return operator_secret.OperatorSecret(kind="operator", value=value, fingerprint=f"fp-{name}")


def _build(src, out, set_name, secret, search=None):
    out.mkdir(parents=True, exist_ok=True)
    return contexts.build(
        "smollm2-135m",
        src / "hf",
        src / "source.json",
        out / "contexts.parquet",
        out / "contexts.json",
        set_name=set_name,
        corpus=CorpusSpec(type="embedded"),
        contexts_per_set=6,
        context_tokens=32,
        continuation_tokens=8,
        seed=0,
        secret=secret,
        search_contexts=search,
    )


def test_search_set_is_public_and_verification_set_follows_the_secret(smollm2_source, tmp_path):
    src, _ = smollm2_source
    search = _build(src, tmp_path / "search", "search", None)
    assert search.secret_label is None and search.excluded_documents == 0
    sets = {}
    for name, secret in [("demo", DEMO), ("a", _secret("a")), ("b", _secret("b"))]:
        manifest = _build(src, tmp_path / name, "verification", secret, tmp_path / "search/contexts.parquet")
        assert manifest.secret_label == secret.label and manifest.excluded_documents == 6
        assert json.loads((tmp_path / name / "contexts.json").read_text())["secret_label"] == secret.label
        assert secret.value not in (tmp_path / name / "contexts.json").read_text()
        sets[name] = pq.read_table(tmp_path / name / "contexts.parquet").to_pandas()
    assert DEMO.label == "public demo"
    searched = pq.read_table(tmp_path / "search/contexts.parquet").to_pandas()
    for table in sets.values():
        assert set(table["set"]) == {"verification"} and len(table) == 6
        assert set(searched["doc_id"]).isdisjoint(table["doc_id"])
        assert table["family"].value_counts().to_dict() == searched["family"].value_counts().to_dict()
    assert set(sets["a"]["doc_id"]) != set(sets["b"]["doc_id"])
    again = _build(src, tmp_path / "again", "verification", _secret("a"), tmp_path / "search/contexts.parquet")
    assert again.secret_label == _secret("a").label
    assert pq.read_table(tmp_path / "again/contexts.parquet").equals(pq.read_table(tmp_path / "a/contexts.parquet"))


def test_the_verification_set_needs_the_secret_and_the_search_set(smollm2_source, tmp_path):
    src, _ = smollm2_source
    with pytest.raises(ValueError, match="operator secret"):
        _build(src, tmp_path / "v", "verification", None)


def test_sampling_seed_of_the_verification_set_only_comes_from_the_secret():
    assert held_out.sampling_seed("search", "s", 7, _secret("a")) == 7
    assert held_out.sampling_seed("search", "s", 7, None) == 7
    seeds = {held_out.sampling_seed("verification", "s", 7, _secret(v)) for v in "abc"}
    assert len(seeds) == 3 and 7 not in seeds
    with pytest.raises(ValueError):
        held_out.sampling_seed("verification", "s", 7, None)


def test_accuracy_gate_questions_follow_the_secret(answer_settings):
    drawn = {
        v: load_questions(answer_settings, seed=held_out.question_seed(_secret(v), answer_settings.seed)) for v in "ab"
    }
    public = load_questions(answer_settings, seed=answer_settings.seed)
    for benchmark in ("gsm8k", "triviaqa", "humaneval"):
        ids = {v: [q.id for q in drawn[v][benchmark].questions] for v in drawn}
        assert ids["a"] != ids["b"]
        assert ids["a"] != [q.id for q in public[benchmark].questions]


def test_a_job_refuses_a_secret_other_than_the_planned_one(monkeypatch):
    settings = {"env": "INFBENCH_TEST_SECRET", "file": None, "require": False}
    monkeypatch.setenv("INFBENCH_TEST_SECRET", "round-1")
    planned = operator_secret.load(settings).fingerprint
    assert operator_secret.for_job(settings, planned).value == "round-1"
    assert operator_secret.for_job(settings, None) is None
    monkeypatch.setenv("INFBENCH_TEST_SECRET", "round-2")
    with pytest.raises(ConfigError, match="operator_secret.*changed since the workflow was planned"):
        operator_secret.for_job(settings, planned)


def test_the_secret_is_released_to_its_owner_only(tmp_path):
    """The operator's file, written after the round: the value, which records no longer hold; mode 0600."""
    secret = _secret("r5")
    out = tmp_path / "operator" / "secret.json"
    operator_secret.write_release(secret, ["b.json", "a.json"], out)
    body = json.loads(out.read_text())
    assert body == {
        "kind": "operator",
        "fingerprint": "fp-r5",
        "label": "operator secret fp-r5",
        "value": "operator-secret-of-round-r5",
        "records": ["a.json", "b.json"],
    }
    assert out.stat().st_mode & 0o777 == 0o600 and not list(out.parent.glob(".*tmp*"))


def test_compression_table_names_the_verification_set_and_marks_unsandboxed_rows(tmp_path):
    from infbench.compression.records import EvaluationRecord
    from infbench.sandbox.launch import SandboxRecord
    from infbench.tables import compression

    paths = []
    isolated = {
        "a": SandboxRecord(kind="bwrap", bwrap_version="bubblewrap 0.8.0"),
        "b": SandboxRecord(kind="none", reason="bubblewrap (bwrap) is not installed"),
    }
    for name, label in [("a", DEMO.label), ("b", _secret("r3").label)]:
        record = EvaluationRecord(
            kind="verification",
            submission=name,
            task="t",
            source="s",
            limit_gib=0.1,
            failed_check="causality",
            secret_label=label,
            sandbox=isolated[name],
        )
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(record.model_dump_json())
    (tmp_path / "source.json").write_text("{}")
    compression.write(
        [str(p) for p in paths],
        [str(tmp_path / "source.json")],
        csv_path=str(tmp_path / "t.csv"),
        md_path=str(tmp_path / "t.md"),
        provenance_path=str(tmp_path / "t.json"),
        config={},
    )
    md = (tmp_path / "t.md").read_text()
    assert "verification set: public demo" in md and "verification set: operator secret fp-r3" in md
    assert "failed: causality" in md
    rows = {r.method: r for r in compression.rows_of(compression.read([str(p) for p in paths]))}
    assert (rows["a"].verdict, rows["a"].isolation) == ("failed: causality", "bubblewrap 0.8.0")
    assert rows["b"].verdict == "failed: causality (unsandboxed)"
    assert rows["b"].isolation == "UNSANDBOXED (bubblewrap (bwrap) is not installed)"
