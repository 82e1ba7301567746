"""Which runs the pipeline ingests, decided when the workflow is parsed (cheap checks only).

A run that fails the check is still ingested by its rule, which records why it
is not; only runs that pass get their final submission verified as candidate
``run-<name>``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel

from infbench.compression.tasks import Task
from infbench.config.model import Config
from infbench.errors import ConfigError
from infbench.layout import LAYOUT
from infbench.runs import ingest
from infbench.runs.schema import Agent

REFERENCE = "reference-search"
REFERENCE_DIR = LAYOUT.reference_search()
# the scripted reference search (infbench.runs.reference_search) as the agent of its run
REFERENCE_AGENT = Agent(model="scripted-reference", scaffold="infbench.runs.reference_search")
NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class RunEntry(BaseModel):
    name: str
    path: str
    inputs: list[str]  # files whose change reruns the run's jobs (or the directory a rule writes)
    reason: str | None = None  # why it cannot be ingested (parse-time check)
    task: str | None = None
    source: str | None = None
    candidate: str | None = None
    final: str | None = None
    final_inputs: list[str] = []  # the final submission's files (or the directory a rule writes)
    label: str | None = None


def reference_task(cfg: Config, tasks: dict[str, Task]) -> Task | None:
    """The task the scripted reference search searches (the config's start checks made sure there is one)."""
    search = cfg.runs.reference_search
    if not search.enabled:
        return None
    if search.task is None:
        first = sorted(cfg.sources)[0]
        return min((t for t in tasks.values() if t.source == first), key=lambda t: t.limit_gib)
    return tasks[search.task]


def _label(name: str, model: str, scaffold: str, effort: str | None) -> str:
    return f"run-{name} ({model}, {scaffold}{', ' + effort if effort else ''})"


def discover(cfg: Config, tasks: dict[str, Task]) -> dict[str, RunEntry]:
    known = set(cfg.runs.prices)
    found: dict[str, RunEntry] = {}
    task = reference_task(cfg, tasks)
    if task is not None:
        found[REFERENCE] = RunEntry(
            name=REFERENCE,
            path=REFERENCE_DIR,
            inputs=[REFERENCE_DIR],
            task=task.name,
            source=task.source,
            candidate=f"run-{REFERENCE}",
            final=f"{REFERENCE_DIR}/final",
            final_inputs=[REFERENCE_DIR],
            label=_label(REFERENCE, REFERENCE_AGENT.model, REFERENCE_AGENT.scaffold, REFERENCE_AGENT.effort),
        )
    root = Path(cfg.runs.dir)
    for path in sorted(root.iterdir()) if root.is_dir() else []:
        if not path.is_dir() or path.name.startswith("."):
            continue
        if not NAME.match(path.name) or path.name in found:
            raise ConfigError(
                "runs.dir",
                f"run directory '{path}': names are [A-Za-z0-9._-]+ and not '{REFERENCE}' (the reference search's)",
            )
        inputs = sorted(str(p) for p in path.rglob("*") if p.is_file())
        entry = RunEntry(
            name=path.name,
            path=str(path),
            inputs=inputs,
            reason=ingest.check(path, known_models=known, tasks=set(tasks)),
        )
        if entry.reason is None:
            spec = ingest.read_spec(path)
            if spec.track == "compression":
                entry.task, entry.source, entry.candidate = spec.task, tasks[spec.task].source, f"run-{path.name}"
                entry.final = os.path.normpath(path / spec.final_submission)
                entry.final_inputs = sorted(str(p) for p in Path(entry.final).rglob("*") if p.is_file())
                entry.label = _label(path.name, spec.agent.model, spec.agent.scaffold, spec.agent.effort)
        found[path.name] = entry
    return found
