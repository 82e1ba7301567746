"""What the workflow runs, computed once from the typed config and the working directory.

The rules read only ``CFG`` (:class:`infbench.config.model.Config`), ``PLAN`` (a :class:`Plan`) and
``LAYOUT`` (:mod:`infbench.layout`), so the order the rule files are included in does not matter. A plan
lists the CompressionBench tasks, the candidates verified for each source (baselines, submissions, agent
runs' final packages), the agent runs ingested, and the ServerBench systems and submissions; planning reads
directory listings and manifests only (no model, no network).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from infbench.compression.submission import MANIFEST
from infbench.compression.tasks import Task, tasks
from infbench.config.model import Config, ServingSettings
from infbench.errors import ConfigError
from infbench.layout import LAYOUT
from infbench.runs.discover import RunEntry, discover, reference_task

SETS = ("search", "verification")
"""The two likelihood sets of every source: search (public seeds) and verification (the operator's secret)."""


@dataclass(frozen=True)
class Plan:
    cfg: Config
    tasks: dict[str, Task]
    submissions: dict[str, Path]
    """Compression submissions: candidate name (``submission-<dir>``) -> directory."""
    runs: dict[str, RunEntry]
    reference_task: Task | None
    serving_submissions: dict[str, str]
    """Server submissions: name -> directory."""

    @property
    def sources(self) -> list[str]:
        return sorted(self.cfg.sources)

    @property
    def run_candidates(self) -> dict[str, RunEntry]:
        """Agent runs whose final submission is verified, by candidate name (``run-<name>``)."""
        return {e.candidate: e for e in self.runs.values() if e.candidate}

    # CompressionBench --------------------------------------------------------------------------------
    def candidates(self, source: str) -> list[str]:
        """Candidate names verified for ``source``: baselines, then user submissions, then agent runs."""
        c = self.cfg.compression
        names = ["bf16"] if c.bf16 else []
        names += ["starter"] if c.starter else []
        names += list(c.gguf_baselines)
        names += [f"released-{n}" for n, r in c.released_gguf.items() if r.source == source]
        if c.gptq.enabled:
            names += [f"gptq-{t.limit_gib:g}gib" for t in self.tasks.values() if t.source == source]
        names += list(c.gptq_variants)
        names += [f"{twin}-vllm" for twin in c.vllm_twins if twin in names]
        names += [name for name, path in self.submissions.items() if _declared_source(path) in (source, None)]
        names += [name for name, run in self.run_candidates.items() if run.source == source]
        return names

    def candidate_inputs(self, source: str, candidate: str) -> list[str] | str:
        """What a candidate's measurement reads: a submission's files (editing one reruns it), a run's final
        submission, or the baseline package a rule builds."""
        if candidate in self.submissions:
            return sorted(str(p) for p in self.submissions[candidate].rglob("*") if p.is_file())
        if candidate in self.run_candidates:
            return self.run_candidates[candidate].final_inputs
        return LAYOUT.candidate(source, candidate)

    def candidate_dir(self, source: str, candidate: str) -> str:
        """The package directory a candidate's measurement runs."""
        if candidate in self.submissions:
            return str(self.submissions[candidate])
        if candidate in self.run_candidates:
            return self.run_candidates[candidate].final
        return LAYOUT.candidate(source, candidate)

    def largest_limit(self, source: str) -> float:
        """The largest storage limit ``source``'s candidates are judged under (their memory cap)."""
        return max(t.limit_gib for t in self.tasks.values() if t.source == source)

    @property
    def compression_records(self) -> list[str]:
        """Every final verification record: one per task and candidate."""
        return [
            LAYOUT.verdict(name, candidate)
            for name, task in self.tasks.items()
            for candidate in self.candidates(task.source)
        ]

    @property
    def run_labels(self) -> dict[str, str]:
        """Final verification record -> the agent run it verifies (the compression table's label)."""
        return {
            LAYOUT.verdict(name, c): self.run_candidates[c].label
            for name, task in self.tasks.items()
            for c in self.candidates(task.source)
            if c in self.run_candidates
        }

    # ServerBench --------------------------------------------------------------------------------------
    @property
    def serving(self) -> ServingSettings | None:
        return self.cfg.serving

    @property
    def serving_systems(self) -> dict[str, int | str]:
        """System -> session concurrency (or ``reference``: the calibrated one) of the development table."""
        return {s.server: s.concurrency for s in self.serving.systems} if self.serving else {}

    @property
    def serving_replays(self) -> list[str]:
        """The development replays' summaries (the final seeds are held out for verification)."""
        if self.serving is None:
            return []
        return [
            LAYOUT.replay(system, seed, "json")
            for system in self.serving_systems
            for seed in self.serving.seeds.development
        ]

    @property
    def serving_baselines(self) -> list[str]:
        """The further reference engines' calibration baselines (``serving.calibration.baselines``)."""
        return [LAYOUT.baseline(engine) for engine in self.serving.calibration.baselines] if self.serving else []

    @property
    def serving_records(self) -> list[str]:
        return [LAYOUT.server_verification(name) for name in self.serving_submissions]

    # the round --------------------------------------------------------------------------------------------
    @property
    def round_records(self) -> list[str]:
        """Every final verification record of the round, both tracks'."""
        return self.compression_records + self.serving_records

    @property
    def targets(self) -> list[str]:
        """What ``rule all`` builds."""
        out = [
            LAYOUT.table("reference", "md"),
            LAYOUT.table("reference", "csv"),
            LAYOUT.plot("reference_ppl", "png"),
            *[LAYOUT.source_gguf(s) for s in self.sources],
            LAYOUT.table("compression", "md"),
            *[LAYOUT.answers_reference(s) for s in self.sources],
            LAYOUT.run_table("status", "md"),
            LAYOUT.operator_secret(),
        ]
        if self.serving is not None:
            out += [
                LAYOUT.table("serving", "md"),
                LAYOUT.table("serving", "csv"),
                LAYOUT.plot("serving_value_share", "png"),
                LAYOUT.coverage("csv"),
                LAYOUT.table("serving_verified", "md"),
            ]
        return out


def build(cfg: Config) -> Plan:
    """The plan of ``cfg`` in the working directory (submission, run and server directories are read
    relative to it)."""
    from infbench.serving.verify.submission import discover as discover_servers

    known = tasks(cfg.tasks)
    _check_vllm_twins(cfg, known)
    return Plan(
        cfg=cfg,
        tasks=known,
        submissions=_submission_dirs(
            cfg.compression.submissions_dir, skip=list(cfg.serving.submissions) if cfg.serving else []
        ),
        runs=discover(cfg, known),
        reference_task=reference_task(cfg, known),
        serving_submissions=discover_servers(list(cfg.serving.submissions)) if cfg.serving else {},
    )


def _check_vllm_twins(cfg: Config, known: dict[str, Task]) -> None:
    """Each of ``compression.vllm_twins`` must be a transformers baseline the pipeline builds."""
    c = cfg.compression
    built = (["bf16"] if c.bf16 else []) + list(c.gptq_variants)
    built += [f"gptq-{t.limit_gib:g}gib" for t in known.values()] if c.gptq.enabled else []
    for twin in c.vllm_twins:
        if twin not in built:
            raise ConfigError(
                f"compression.vllm_twins.{twin}",
                f"not a transformers baseline this config builds (one of: {', '.join(built) or 'none'})",
            )


def _submission_dirs(root: str | Path, skip: list[str]) -> dict[str, Path]:
    """The packages under ``root``: its subdirectories, less the server submissions' roots (``skip``; the
    default puts ``submissions/servers`` inside ``submissions``)."""
    root = Path(root)
    if not root.is_dir():
        return {}
    skipped = {Path(s).resolve() for s in skip}
    return {
        f"submission-{p.name}": p
        for p in sorted(root.iterdir())
        if p.is_dir() and not p.name.startswith(".") and p.resolve() not in skipped
    }


def _declared_source(package: Path) -> str | None:
    """The source a package's manifest names, or None if it cannot be read (verification records why)."""
    try:
        return str(yaml.safe_load((package / MANIFEST).read_text())["source"])
    except Exception:
        return None
