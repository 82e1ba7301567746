"""The ``answers`` config section as typed settings (PROTOCOL A5.2).

The schema (``workflow/schemas/config.schema.yaml``, section ``answers``) is
the one place defaults live (the paper's values); Snakemake fills them in when
it validates the config. These models mirror that section without defaults of
their own: :func:`from_config` turns the validated section into settings.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infbench.config_io import section

Benchmark = Literal["gsm8k", "humaneval", "triviaqa"]
BENCHMARKS: tuple[Benchmark, ...] = ("gsm8k", "humaneval", "triviaqa")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetSpec(_Strict):
    """Arguments of ``datasets.load_dataset`` for a benchmark (paper profile)."""

    path: str
    name: str | None
    split: str
    fewshot_split: str
    data_files: dict[str, str] | None


class BenchmarkSettings(_Strict):
    n_questions: int = Field(ge=1)
    shots: int = Field(ge=0)
    max_new_tokens: int = Field(ge=1)
    stop: tuple[str, ...]


class GSM8KSettings(BenchmarkSettings):
    dataset: DatasetSpec


class TriviaQASettings(BenchmarkSettings):
    dataset: DatasetSpec


class HumanEvalSettings(BenchmarkSettings):
    shots: Literal[0]
    timeout_s: float = Field(gt=0)
    memory_mb: int = Field(ge=64)
    workers: int = Field(ge=1)


class AnswerSettings(_Strict):
    questions: Literal["embedded", "datasets"]
    seed: int = Field(ge=0)
    rho: float = Field(gt=0, le=1)
    batch_size: int = Field(ge=1)
    dtype: Literal["bfloat16", "float16", "float32"]
    device: str = Field(pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$")
    gsm8k: GSM8KSettings
    humaneval: HumanEvalSettings
    triviaqa: TriviaQASettings

    def benchmark(self, name: Benchmark) -> BenchmarkSettings:
        return getattr(self, name)


def from_config(config: dict[str, Any]) -> AnswerSettings:
    """Settings from a validated config (``config["answers"]``, defaults filled by the schema)."""
    return section(config, "answers", AnswerSettings)
