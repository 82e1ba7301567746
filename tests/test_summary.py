"""``infbench summary`` (and the workflow's onsuccess): the verdicts and scores of the tables a run made."""

import subprocess
from pathlib import Path

from conftest import INFBENCH

from infbench.layout import Layout
from infbench.tables.compression import CompressionRow
from infbench.tables.io import write_table
from infbench.tables.serving_verified import VerifiedRow


def _row(model, **values):
    return model.model_validate({**dict.fromkeys(model.model_fields), **values})


def _write(root: Path, name: str, rows) -> None:
    layout = Layout(str(root))
    Path(layout.table(name, "csv")).parent.mkdir(parents=True, exist_ok=True)
    write_table(
        rows,
        csv_path=layout.table(name, "csv"),
        md_path=layout.table(name, "md"),
        provenance_path=layout.table(name, "provenance.json"),
        params={"table": name},
        config={},
        inputs={},
    )


def _compression(task, method, verdict, score, f_v=None, gib=None):
    return _row(
        CompressionRow,
        task=task,
        source="s",
        limit_gib=0.1,
        method=method,
        verdict=verdict,
        score=score,
        f_v=f_v,
        package_gib=gib,
        isolation="bubblewrap 0.8",
    )


def _served(system, verdict, d_at_c, d=None):
    text = dict.fromkeys(["counts", "checks_passed", "probes", "isolation", "resources", "cause"], "")  # empty cells
    return _row(VerifiedRow, deployment="cpu", system=system, seeds="1000", verdict=verdict, D=d, D_at_c=d_at_c, **text)


def _summary(results: Path) -> subprocess.CompletedProcess:
    return subprocess.run([INFBENCH, "summary", "--results", str(results)], capture_output=True, text=True)


def test_verdict_counts_and_the_best_verified_score_per_task(tmp_path):
    results = tmp_path / "results"
    _write(
        results,
        "compression",
        [
            _compression("t-0.1gib", "bf16", "failed: storage_package", 0.0, 1.0, 0.25),
            _compression("t-0.1gib", "gguf-Q4_0", "verified", 0.91, 0.91, 0.09),
            _compression("t-0.1gib", "my-q3", "verified", 0.87, 0.87, 0.08),
            _compression("t-0.12gib", "bf16", "failed: storage_package", 0.0, 1.0, 0.25),
            _compression("t-0.12gib", "mine", "failed: accuracy_gate (unsandboxed)", 0.0, 0.99, 0.11),
        ],
    )
    proc = _summary(results)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"CompressionBench ({results}/tables/compression.csv, 5 rows):",
        "  1 failed: accuracy_gate (unsandboxed)",
        "  2 failed: storage_package",
        "  2 verified",
        "  best verified on t-0.12gib: none",
        "  best verified on t-0.1gib: gguf-Q4_0, score 0.91 (f_v 0.91, 0.09 GiB)",
        f"Tables: {results}/tables/ (csv, md); the report: `make report` writes report.html",
    ]


def test_served_systems_with_d_and_its_interval(tmp_path):
    results = tmp_path / "results"
    _write(
        results,
        "serving_verified",
        [
            _served("llamacpp (reference)", "reference", "0.5 [0.4, 0.6] @2", 0.5),
            _served("S0", "verified", "0.7 [0.6, 0.8] @1", 0.7),
            _served("S1", "verified", "too few requests: 2 completed timed requests < 30 (D 0 [0, 0]) @1"),
            _served("cheat", "failed: fidelity", "not scored (fails fidelity)"),
        ],
    )
    out = _summary(results).stdout.splitlines()
    assert out[1:5] == [
        "  1 failed: fidelity",
        "  1 reference",
        "  2 verified",
        "  llamacpp (reference): D 0.5 [0.4, 0.6] @2",
    ]
    assert out[5:7] == [
        "  S0: D 0.7 [0.6, 0.8] @1",
        "  S1: too few requests: 2 completed timed requests < 30 (D 0 [0, 0]) @1",
    ]
    assert not any("cheat" in line for line in out)


def test_missing_or_unreadable_tables_never_stop_it(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    proc = _summary(results)
    assert proc.returncode == 0 and proc.stdout == f"{results}: no tables yet under {results}/tables/\n"
    (results / "tables").mkdir()
    (results / "tables/serving.csv").write_text("system,D\nS0,0.5\n")  # an older layout
    proc = _summary(results)
    assert proc.returncode == 0 and "ServerBench, development seeds (unverified)" in proc.stdout
    assert "not summarised (" in proc.stdout
    proc = _summary(tmp_path / "nowhere")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--results" in proc.stderr
