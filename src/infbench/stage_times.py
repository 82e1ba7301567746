"""Seconds and peak memory per stage and per rule, from the ``benchmark:`` files of a pipeline run.

Every rule writes ``benchmarks/<rule>[/<wildcards>].tsv`` (Snakemake's benchmark record: wall
seconds ``s``, peak resident memory ``max_rss`` in MB, ``cpu_time`` in seconds, ...). The stage
table sums the job seconds of each stage: jobs that ran at the same time count each, so the total
can exceed the run's wall time. A rerun overwrites the files of the jobs it ran only; the others keep
the times of their last run.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from infbench import atomic

# Stages in the order a run goes through them, each with its rules (every rule of the workflow).
STAGES: dict[str, tuple[str, ...]] = {
    "CompressionBench: source, F16 twin, contexts, sampling, scoring, reference table": (
        "source_model", "source_gguf", "contexts", "sample_continuations", "score_reference", "reference_table",
        "plot_reference"),
    "CompressionBench: accuracy reference A(p)": ("answers_reference",),
    "CompressionBench: baseline packages (BF16, starter, GGUF, released GGUF, GPTQ)": (
        "bf16_package", "starter_submission", "gguf_baseline", "released_gguf", "gptq_baseline"),
    "CompressionBench: final verification and table": ("measure_candidate", "verify", "compression_table"),
    "Agent runs: scripted reference search, ingestion, analyses": ("reference_search", "ingest_run",
                                                                   "runs_analysis"),
    "ServerBench: workload, coverage, calibration, replays, table": (
        "serving_synthetic", "serving_workload", "serving_coverage", "serving_calibrate", "serving_replay",
        "serving_table"),
    "ServerBench verification: reference, submissions, table": (
        "serving_verification_reference", "serving_verify", "serving_verified_table"),
}
STAGE_OF = {rule: stage for stage, rules in STAGES.items() for rule in rules}


def read(benchmarks: str | Path) -> pd.DataFrame:
    """One row per job: rule, job (the wildcards' part of the path), s, max_rss (MB), cpu_time (s)."""
    root = Path(benchmarks)
    rows = []
    for path in sorted(root.rglob("*.tsv")):
        rel = path.relative_to(root).with_suffix("")
        rule = rel.parts[0]
        record = pd.read_csv(path, sep="\t", na_values=["NA"]).iloc[-1]  # the last repeat
        rows.append({"rule": rule, "job": "/".join(rel.parts[1:]) or rule, "s": float(record["s"]),
                     "max_rss": record["max_rss"], "cpu_time": record["cpu_time"]})
    if not rows:
        raise FileNotFoundError(f"no benchmark files under {root} (run the pipeline first)")
    frame = pd.DataFrame(rows)
    frame["stage"] = frame["rule"].map(STAGE_OF).fillna("other")
    return frame


def _summary(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    table = frame.groupby(by, sort=False).agg(jobs=("job", "size"), seconds=("s", "sum"), longest_job_s=("s", "max"),
                                              max_rss_mb=("max_rss", "max"), cpu_s=("cpu_time", "sum"))
    return table.round({"seconds": 0, "longest_job_s": 0, "max_rss_mb": 0, "cpu_s": 0})


def stage_table(frame: pd.DataFrame) -> pd.DataFrame:
    order = [s for s in [*STAGES, "other"] if s in set(frame["stage"])]
    table = _summary(frame, "stage").loc[order]
    total = pd.DataFrame([{"jobs": len(frame), "seconds": round(frame["s"].sum()),
                           "longest_job_s": round(frame["s"].max()), "max_rss_mb": round(frame["max_rss"].max()),
                           "cpu_s": round(frame["cpu_time"].sum())}], index=["all stages"])
    return pd.concat([table, total])


def rule_table(frame: pd.DataFrame) -> pd.DataFrame:
    order = [r for r in [*STAGE_OF, *sorted(set(frame["rule"]) - set(STAGE_OF))] if r in set(frame["rule"])]
    return _summary(frame, "rule").loc[order]


def report(benchmarks: str | Path, out_md: str | None = None) -> str:
    """The stage table and the rule table as Markdown."""
    frame = read(benchmarks)
    text = (f"Per stage (sums of job seconds; max RSS in MB is the largest of one job), from {benchmarks}/\n\n"
            f"{stage_table(frame).to_markdown()}\n\nPer rule\n\n{rule_table(frame).to_markdown()}\n")
    if out_md:
        atomic.write_text(out_md, text)
    return text
