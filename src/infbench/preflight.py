"""The checks run before any job, after the config is typed (:mod:`infbench.config` checks the config alone):
those that look at the machine the workflow starts on (the llama.cpp converter's file, installed Python
distributions, the GPUs Snakemake grants) or reach into the tracks (launch specs rendered, embedded question
pools drawn, task names). Each raises a :class:`ConfigError` naming the key to fix. None reads the network or
loads a model.

The workflow runs :func:`check` beside :func:`infbench.plan.build` (workflow/rules/common.smk); what only a
job needs from outside the repository (:func:`outside`: llama.cpp's converter) is one line of the plan and fails
the job needing it (:func:`infbench.sources.gguf_converter`), so that a paper profile plans on a laptop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench import resources, sources
from infbench.compression.submission import MANIFEST, Manifest, SubmissionError, load_manifest
from infbench.compression.tasks import task_name
from infbench.config.model import Config, ServingCore
from infbench.errors import ConfigError, InputFileError
from infbench.evaluation.questions import load_questions
from infbench.serving.servers import LaunchVars, dry_run
from infbench.serving.verify import submission as server_submission
from infbench.sources import resolve_gguf


@dataclass(frozen=True)
class GpuBudget:
    """The GPUs a Snakemake invocation grants: ``overrides`` (a workflow profile's ``set-resources`` and
    ``--set-resources``: rule -> resource -> value) and ``limit`` (``--resources gpu=N``)."""

    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    limit: int | None = None


def check(cfg: Config, gpus: GpuBudget | None = None) -> None:
    """Every check that needs no file from outside the repository, in order."""
    for name, source in cfg.sources.items():
        resolve_gguf(name, source.origin)  # a python_package installed, its file there
    answers(cfg)
    if cfg.serving is not None:
        serving_specs(cfg.serving)
    gpu_counts(cfg, gpus or GpuBudget())
    reference_search_task(cfg)


def outside(cfg: Config) -> list[ConfigError]:
    """What the jobs need from outside the repository that is missing: llama.cpp's converter for each source
    that is not a GGUF file."""
    missing = []
    for name, source in cfg.sources.items():
        try:
            sources.gguf_converter(cfg.llama_cpp.convert_hf_to_gguf, name, source.origin)
        except ConfigError as exc:
            missing.append(exc)
    return missing


def answers(cfg: Config) -> None:
    """Offline (embedded) question sets select: enough questions and few-shot exemplars in each pool."""
    if cfg.answers.questions == "embedded":
        load_questions(cfg.answers, seed=cfg.answers.seed)


def serving_specs(section: ServingCore) -> None:
    """Every server's launch spec renders."""
    for name, spec in section.servers.items():
        dry_run(name, spec, LaunchVars())


def gpu_counts(cfg: Config, budget: GpuBudget) -> None:
    """GPU rules without GPUs. A rule of ``resources.GPU_RULES`` runs on CUDA when its config key says so
    and then asks the scheduler for ``resources.job_gpus`` GPUs. Rejected here, naming the key: ``cuda:N``
    with N > 0 in any device key (a job sees only the GPUs it is given, counted from 0); vLLM with
    ``likelihood.tensor_parallel`` below a source's ``devices``; ``budget.overrides`` that give such a rule
    fewer GPUs than its config needs; a ``budget.limit`` below a rule's need (Snakemake would shrink the
    job's request to it)."""
    likelihood = cfg.likelihood
    for name, source in cfg.sources.items():
        if likelihood.backend == "vllm" and likelihood.tensor_parallel < source.devices:
            raise ConfigError(
                "likelihood.tensor_parallel",
                f"{likelihood.tensor_parallel} GPU(s) per vLLM engine, but source '{name}' "
                f"needs {source.devices} to hold it in BF16 (sources.{name}.devices)",
            )
    for rule in resources.GPU_RULES:
        if rule.startswith("serving_"):
            targets = [cfg.serving.source] if cfg.serving is not None else []
        elif rule == "gptq_baseline":
            targets = sorted(cfg.sources) if cfg.compression.gptq.enabled else []
        elif rule == "gptq_variant":
            targets = sorted(cfg.sources) if cfg.compression.gptq.variants else []
        elif rule == "gguf_imatrix":
            imatrix = any(t.imatrix for t in cfg.compression.gguf_baselines.values())
            targets = sorted(cfg.sources) if imatrix else []
        else:
            targets = sorted(cfg.sources)
        for name in targets:
            needed = resources.job_gpus(cfg, rule, name)  # raises on cuda:N, N > 0
            if needed == 0:
                continue
            key = resources.gpu_key(cfg, rule)
            given = resources.requested_gpus(budget.overrides.get(rule, {}))
            if given is not None and given < needed:
                raise ConfigError(
                    key,
                    f"rule {rule} (source '{name}') needs {needed} GPU(s) but "
                    f"set-resources gives it {given} (a workflow profile or "
                    "--set-resources); remove that override, the GPU count follows the "
                    "config",
                )
            if budget.limit is not None and budget.limit < needed:
                raise ConfigError(
                    key,
                    f"rule {rule} (source '{name}') needs {needed} GPU(s) but --resources allows gpu={budget.limit}",
                )


def reference_search_task(cfg: Config) -> None:
    """An enabled reference search searches a task of ``tasks``: the one it names, or (null) the tightest
    task of the first source, which must then have one."""
    key = "runs.reference_search.task"
    search = cfg.runs.reference_search
    if not search.enabled:
        return
    tasks = list(dict.fromkeys(task_name(t.source, t.limit_gib) for t in cfg.tasks))
    if search.task is None:
        first = sorted(cfg.sources)[0]
        if not any(t.source == first for t in cfg.tasks):
            raise ConfigError(
                key,
                f"null picks the tightest task of the first source '{first}', which has "
                f"none (tasks: {', '.join(tasks)})",
            )
    elif search.task not in tasks:
        raise ConfigError(key, f"unknown task '{search.task}' (tasks: {', '.join(tasks)})")


# submissions: what can be checked without running the model -----------------------------------------------


def submissions(compression: Mapping[str, Path], servers: Mapping[str, str], cfg: Config) -> None:
    """The plan's submissions, before any job: each compression package's manifest (fields, files it names,
    a configured source) and each server's spec (fields, launch command); a broken one fails the start in
    seconds naming the file and the field, not its verification record an hour later."""
    for directory in compression.values():
        compression_submission(directory, cfg)
    for directory in servers.values():
        server_submission.load(directory)


def compression_submission(directory: str | Path, cfg: Config | None = None) -> Manifest:
    """A compression package's manifest and the files it names; with ``cfg``, its source is configured."""
    manifest = load_manifest(directory)
    if cfg is not None and manifest.source not in cfg.sources:
        raise SubmissionError(
            f"{Path(directory) / MANIFEST}: field 'source': unknown source '{manifest.source}' "
            f"(sources: {', '.join(sorted(cfg.sources))})"
        )
    return manifest


def tokenizer_loads(directory: str | Path, manifest: Manifest) -> None:
    """The package's tokenizer loads (that it is the source's is checked at verification, beside the source)."""
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(Path(directory) / manifest.tokenizer)
    except Exception as exc:  # whatever transformers raises for a broken tokenizer
        detail = " ".join(str(exc).split())[:200]
        raise SubmissionError(
            f"{Path(directory) / MANIFEST}: field 'tokenizer': {manifest.tokenizer} does not load "
            f"({type(exc).__name__}: {detail})"
        ) from None


def server_requirements(directory: str | Path, cfg: Config) -> None:
    """A server's spec and its ``requires``: each importable by the server's Python, in its sandbox."""
    sub = server_submission.load(directory)
    missing = server_submission.missing_requirements(sub, directory, cfg.sandbox)
    if missing:
        raise InputFileError(
            server_submission.spec_path(directory), f"field 'requires': not importable: {', '.join(missing)}"
        )
