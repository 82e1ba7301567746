"""Seconds and peak memory per stage and per rule, from the ``benchmark:`` files of a pipeline run.

Every rule writes ``benchmarks/<rule>[/<wildcards>].tsv`` (Snakemake's benchmark record: wall
seconds ``s``, peak resident memory ``max_rss`` in MB, ``cpu_time`` in seconds, ...). The stage
table sums the job seconds of each stage: jobs that ran at the same time count each, so the total
can exceed the run's wall time. A rerun overwrites the files of the jobs it ran only; the others keep
the times of their last run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from infbench import atomic
from infbench.errors import InputFileError

WORKFLOW = Path(__file__).resolve().parents[2]


def stages(workflow: Path = WORKFLOW) -> dict[str, tuple[str, ...]]:
    """Each stage (a rule file, ``workflow/rules/<stage>.smk``: one per stage) with its rules, in the order
    the Snakefile includes them; a stage is named by its file and the first line of its heading comment."""
    out: dict[str, tuple[str, ...]] = {}
    for include in re.findall(r'^\s*include: "workflow/rules/(\w+)\.smk"', (workflow / "Snakefile").read_text(), re.M):
        text = (workflow / "workflow" / "rules" / f"{include}.smk").read_text()
        rules = tuple(re.findall(r"^\s*rule (\w+):", text, re.M))
        if rules:
            heading = next((line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")), "")
            title = re.split(r"[:(]", heading)[0].strip().rstrip(".,")
            out[f"{include}: {title}" if title else include] = rules
    return out


def read(benchmarks: str | Path) -> pd.DataFrame:
    """One row per job: rule, job (the wildcards' part of the path), s, max_rss (MB), cpu_time (s)."""
    root = Path(benchmarks)
    rows = []
    for path in sorted(root.rglob("*.tsv")):
        rel = path.relative_to(root).with_suffix("")
        rule = rel.parts[0]
        record = pd.read_csv(path, sep="\t", na_values=["NA"]).iloc[-1]  # the last repeat
        rows.append(
            {
                "rule": rule,
                "job": "/".join(rel.parts[1:]) or rule,
                "s": float(record["s"]),
                "max_rss": record["max_rss"],
                "cpu_time": record["cpu_time"],
            }
        )
    if not rows:
        raise InputFileError(root, "no benchmark files here (run the pipeline first, or name its --benchmarks)")
    frame = pd.DataFrame(rows)
    stage_of = {rule: stage for stage, rules in stages().items() for rule in rules}
    frame["stage"] = frame["rule"].map(stage_of).fillna("other")
    return frame


def _summary(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    table = frame.groupby(by, sort=False).agg(
        jobs=("job", "size"),
        seconds=("s", "sum"),
        longest_job_s=("s", "max"),
        max_rss_mb=("max_rss", "max"),
        cpu_s=("cpu_time", "sum"),
    )
    return table.round({"seconds": 0, "longest_job_s": 0, "max_rss_mb": 0, "cpu_s": 0})


def stage_table(frame: pd.DataFrame) -> pd.DataFrame:
    order = [s for s in [*stages(), "other"] if s in set(frame["stage"])]
    table = _summary(frame, "stage").loc[order]
    total = pd.DataFrame(
        [
            {
                "jobs": len(frame),
                "seconds": round(frame["s"].sum()),
                "longest_job_s": round(frame["s"].max()),
                "max_rss_mb": round(frame["max_rss"].max()),
                "cpu_s": round(frame["cpu_time"].sum()),
            }
        ],
        index=["all stages"],
    )
    return pd.concat([table, total])


def rule_table(frame: pd.DataFrame) -> pd.DataFrame:
    known = [rule for rules in stages().values() for rule in rules]
    order = [r for r in [*known, *sorted(set(frame["rule"]) - set(known))] if r in set(frame["rule"])]
    return _summary(frame, "rule").loc[order]


def report(benchmarks: str | Path, out_md: str | None = None) -> str:
    """The stage table and the rule table as Markdown."""
    frame = read(benchmarks)
    text = (
        f"Per stage (sums of job seconds; max RSS in MB is the largest of one job), from {benchmarks}/\n\n"
        f"{stage_table(frame).to_markdown()}\n\nPer rule\n\n{rule_table(frame).to_markdown()}\n"
    )
    if out_md:
        atomic.write_text(out_md, text)
    return text
