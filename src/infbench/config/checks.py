"""Start-of-run checks of a config that its types and bounds cannot express, run as validators of the
models in :mod:`infbench.config.model`; each raises a :class:`ConfigError` naming the key to fix.

None of them reads the network or loads a model, but some look at the machine the workflow starts on: the
llama.cpp converter's file, installed Python distributions, the embedded question pools. Modules of the
tracks are imported where they are used, so that they can import the config models in turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infbench.errors import ConfigError
from infbench.layout import LAYOUT

if TYPE_CHECKING:
    from infbench.config.model import Config, ServingCore, SourceOrigin


@dataclass(frozen=True)
class GpuBudget:
    """The GPUs a Snakemake invocation grants: ``overrides`` (a workflow profile's ``set-resources`` and
    ``--set-resources``: rule -> resource -> value) and ``limit`` (``--resources gpu=N``)."""

    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    limit: int | None = None


def config(cfg: Config, gpus: GpuBudget | None) -> None:
    """The checks that span sections, in the order :func:`infbench.config.files.load` runs them (the serving
    section's own,
    :func:`serving`, run when it is validated, before these)."""
    from infbench.sources import resolve_gguf

    known = cfg.sources
    for i, task in enumerate(cfg.tasks):
        if task.source not in known:
            raise ConfigError(
                f"tasks[{i}].source", f"unknown source '{task.source}' (sources: {', '.join(sorted(known))})"
            )
    for name, source in known.items():
        if resolve_gguf(name, source.origin) is None:  # a python_package installed, a local path there
            gguf_converter(cfg, name, source.origin)
    answers(cfg)
    if cfg.serving is not None and cfg.serving.source not in known:
        raise ConfigError("serving.source", f"unknown source '{cfg.serving.source}'")
    gpu_counts(cfg, gpus or GpuBudget())
    reference_search_task(cfg)


def gguf_converter(cfg: Config, name: str, origin: SourceOrigin) -> None:
    """A source that is not a GGUF file (a hub checkpoint, a local checkpoint directory) gets its F16 GGUF
    twin from llama.cpp's ``convert_hf_to_gguf.py``: the twin of every source is a target of the workflow
    (``rule all``; also the input of the GGUF baselines, the reference search and the serving stages), so
    the script must be configured and exist before the source is downloaded, not after."""
    key = "llama_cpp.convert_hf_to_gguf"
    script = cfg.llama_cpp.convert_hf_to_gguf
    if origin.type == "hub":
        where = f"hub checkpoint '{origin.repo_id}'"
    else:
        where = f"checkpoint directory {origin.path}"
    if not script:
        raise ConfigError(
            key,
            f"source '{name}' is a {where}, not a GGUF file; its F16 GGUF twin "
            f"({LAYOUT.source_gguf(name)}) is built by llama.cpp's "
            "convert_hf_to_gguf.py: set this key to that script's path "
            "(docs/paper_scale.md)",
        )
    path = Path(script)
    if not path.is_file():
        raise ConfigError(
            key,
            f"'{script}' is not a file (looked at {path.resolve()}; relative paths are "
            f"read from the working directory); it builds the F16 GGUF twin of source "
            f"'{name}' (a {where})",
        )


def answers(cfg: Config) -> None:
    """Offline (embedded) question sets select: enough questions and few-shot exemplars in each pool."""
    if cfg.answers.questions == "embedded":
        from infbench.evaluation.questions import load_questions

        load_questions(cfg.answers, seed=cfg.answers.seed)


def serving(section: ServingCore) -> None:
    """The serving section: known servers, renderable launch specs, disjoint seeds."""
    from infbench.serving.servers import LaunchVars, dry_run

    known = section.servers
    for name, spec in known.items():
        dry_run(name, spec, LaunchVars())
    ref = section.calibration.reference
    if ref not in known:
        raise ConfigError("serving.calibration.reference", f"unknown server '{ref}' (servers: {', '.join(known)})")
    for i, engine in enumerate(section.calibration.baselines):
        if engine not in known or engine == ref:
            why = "the reference itself" if engine == ref else f"unknown server (servers: {', '.join(known)})"
            raise ConfigError(f"serving.calibration.baselines[{i}]", f"'{engine}': {why}")
    for i, system in enumerate(section.systems):
        if system.server not in known:
            raise ConfigError(f"serving.systems[{i}].server", f"unknown server '{system.server}'")
    seeds = section.seeds
    disjoint_seeds(
        {
            "development": seeds.development,
            "final": seeds.final,
            "calibration": seeds.calibration,
            "coverage": section.coverage.seed_list,
        }
    )


def disjoint_seeds(seed_sets: Mapping[str, tuple[int, ...] | list[int]]) -> None:
    """Development, final, calibration and coverage seeds must never overlap."""
    names = sorted(seed_sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            common = set(seed_sets[a]) & set(seed_sets[b])
            if common:
                raise ConfigError(f"serving.seeds.{b}", f"shares seeds {sorted(common)[:5]} with {a}")


def token_id_range(value: tuple[int, int]) -> tuple[int, int]:
    """``serving.workload.token_id_range`` is a non-empty ``[low, high)``."""
    low, high = value
    if not low < high:
        raise ConfigError("serving.workload.token_id_range", f"empty range [{low}, {high})")
    return value


def start_ratio(value: tuple[float, float]) -> tuple[float, float]:
    """``serving.replay.start_ratio`` is a range ``[first, last]``."""
    first, last = value
    if first > last:
        raise ConfigError("serving.replay.start_ratio", f"[{first}, {last}] is not a range (first > last)")
    return value


def gpu_counts(cfg: Config, budget: GpuBudget) -> None:
    """GPU rules without GPUs. A rule of ``resources.GPU_RULES`` runs on CUDA when its config key says so
    and then asks the scheduler for ``resources.job_gpus`` GPUs. Rejected here, naming the key: ``cuda:N``
    with N > 0 in any device key (a job sees only the GPUs it is given, counted from 0); vLLM with
    ``likelihood.tensor_parallel`` below a source's ``devices``; ``budget.overrides`` that give such a rule
    fewer GPUs than its config needs; a ``budget.limit`` below a rule's need (Snakemake would shrink the
    job's request to it)."""
    from infbench import resources

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
    from infbench.compression.tasks import task_name

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
