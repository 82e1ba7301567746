"""Checks of a schema-valid config that the schema cannot express.

Run once when the workflow starts (workflow/rules/common.smk), so a bad config stops before any job:
none of them reads the network or loads a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from infbench import resources
from infbench.compression.answers.questions import check_config as check_answers
from infbench.errors import ConfigError
from infbench.sources import SourceOrigin, resolve_gguf


def check(config: dict[str, Any]) -> None:
    sources = config["sources"]
    for i, task in enumerate(config["tasks"]):
        if task["source"] not in sources:
            raise ConfigError(f"tasks[{i}].source",
                              f"unknown source '{task['source']}' (sources: {', '.join(sorted(sources))})")
    for name, spec in sources.items():
        origin = SourceOrigin.model_validate(spec["origin"])
        gguf = resolve_gguf(name, origin)  # hub origins: only checks that repo_id is set
        if gguf is None:
            check_gguf_converter(config, name, origin)
    check_answers(config)


def check_gguf_converter(config: dict[str, Any], name: str, origin: SourceOrigin) -> None:
    """A source that is not a GGUF file (a hub checkpoint, a local checkpoint directory) gets its F16 GGUF
    twin from llama.cpp's ``convert_hf_to_gguf.py``: the twin of every source is a target of the workflow
    (``rule all``; also the input of the GGUF baselines, the reference search and the serving stages), so
    the script must be configured and exist before the source is downloaded, not after."""
    key = "llama_cpp.convert_hf_to_gguf"
    script = config.get("llama_cpp", {}).get("convert_hf_to_gguf")
    where = f"hub checkpoint '{origin.repo_id}'" if origin.type == "hub" else f"checkpoint directory {origin.path}"
    if not script:
        raise ConfigError(key, f"source '{name}' is a {where}, not a GGUF file; its F16 GGUF twin "
                               f"(results/sources/{name}/f16.gguf) is built by llama.cpp's convert_hf_to_gguf.py: "
                               "set this key to that script's path (docs/paper_scale.md)")
    path = Path(script)
    if not path.is_file():
        raise ConfigError(key, f"'{script}' is not a file (looked at {path.resolve()}; relative paths are "
                               f"read from the working directory); it builds the F16 GGUF twin of source "
                               f"'{name}' (a {where})")


def check_gpus(config: dict[str, Any], overrides: Mapping[str, Mapping[str, Any]] | None = None,
               limit: int | None = None) -> None:
    """GPU rules without GPUs. A rule of ``resources.GPU_RULES`` runs on CUDA when its config key says so
    (``likelihood.device`` or ``backend: vllm``, ``verification.device``, ``answers.device``,
    ``compression.gptq.device``, ``serving.deployment.accelerator: gpu``) and then asks the scheduler for
    ``resources.job_gpus`` GPUs: the source's ``devices`` (vLLM: ``likelihood.tensor_parallel``; GPTQ: 1).
    Rejected here, naming the key:

    - ``cuda:N`` with N > 0 in any device key: a job sees only the GPUs it is given, counted from 0;
    - vLLM with ``likelihood.tensor_parallel`` below a source's ``sources.<name>.devices``: the engine would
      hold the BF16 source on fewer GPUs than it needs;
    - ``overrides`` (a workflow profile's ``set-resources`` or ``--set-resources``: rule -> resources) that
      give such a rule fewer GPUs than its config needs, e.g. ``measure_candidate: {gpu: 0}`` with
      ``verification.device: cuda``;
    - a global ``limit`` (``--resources gpu=N``) below a rule's need: Snakemake would shrink the job's request
      to it.

    A rule on ``cpu`` or ``auto`` asks for no GPU (``auto`` uses one only if the job is given it); that is
    never an error. Whether the GPUs are visible when the job runs is checked in the job
    (``resources.check_visible_gpus``)."""
    overrides = overrides or {}
    likelihood = config["likelihood"]
    for name in config["sources"]:
        devices = resources.source_devices(config, name)
        if likelihood["backend"] == "vllm" and likelihood["tensor_parallel"] < devices:
            raise ConfigError("likelihood.tensor_parallel",
                              f"{likelihood['tensor_parallel']} GPU(s) per vLLM engine, but source '{name}' needs "
                              f"{devices} to hold it in BF16 (sources.{name}.devices)")
    for rule in resources.GPU_RULES:
        if rule.startswith("serving_"):
            targets = [config["serving"]["source"]] if config.get("serving") else []
        elif rule == "gptq_baseline":
            targets = sorted(config["sources"]) if config["compression"]["gptq"]["enabled"] else []
        else:
            targets = sorted(config["sources"])
        for name in targets:
            needed = resources.job_gpus(config, rule, name)  # raises on cuda:N, N > 0
            if needed == 0:
                continue
            key = resources.gpu_key(config, rule)
            given = resources.requested_gpus(overrides.get(rule, {}))
            if given is not None and given < needed:
                raise ConfigError(key, f"rule {rule} (source '{name}') needs {needed} GPU(s) but set-resources "
                                       f"gives it {given} (a workflow profile or --set-resources); remove that "
                                       "override, the GPU count follows the config")
            if limit is not None and limit < needed:
                raise ConfigError(key, f"rule {rule} (source '{name}') needs {needed} GPU(s) but --resources "
                                       f"allows gpu={limit}")


def check_serving(config: dict[str, Any]) -> None:
    """The serving section: known source and servers, disjoint seeds, renderable launch specs."""
    from infbench.serving import servers, workload

    serving = config.get("serving")
    if serving is None:
        return
    if serving["source"] not in config["sources"]:
        raise ConfigError("serving.source", f"unknown source '{serving['source']}'")
    known = serving["servers"]
    ref = serving["calibration"]["reference"]
    if ref not in known:
        raise ConfigError("serving.calibration.reference", f"unknown server '{ref}' (servers: {', '.join(known)})")
    for i, system in enumerate(serving["systems"]):
        if system["server"] not in known:
            raise ConfigError(f"serving.systems[{i}].server", f"unknown server '{system['server']}'")
    for name, spec in known.items():
        servers.dry_run(name, servers.ServerSpec.model_validate(spec), servers.LaunchVars())
    cov = serving["coverage"]
    workload.check_disjoint({**serving["seeds"],
                             "coverage": list(range(cov["first_seed"], cov["first_seed"] + cov["seeds"]))})
    low, high = serving["workload"]["token_id_range"]
    if not low < high:
        raise ConfigError("serving.workload.token_id_range", f"empty range [{low}, {high})")
    first, last = serving["replay"]["start_ratio"]
    if first > last:
        raise ConfigError("serving.replay.start_ratio", f"[{first}, {last}] is not a range (first > last)")
