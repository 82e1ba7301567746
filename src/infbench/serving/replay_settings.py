"""One replay's settings: the server, the concurrency and seed, the window, and what its prompts are made of
(:meth:`ReplaySettings.prompt_builder`); :meth:`ReplaySettings.for_serving` makes them from the config."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from infbench.config.model import FarContextSettings, ServingCore
from infbench.serving.endpoints import API
from infbench.serving.workload import PromptBuilder, public_prompt_seed


class ReplaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    base_url: str
    model: str
    concurrency: int = Field(ge=1)
    seed: int
    warmup_s: float = Field(ge=0)
    window_s: float = Field(gt=0)
    request_timeout_s: float = Field(gt=0)
    idle_cap_s: float | None = Field(gt=0, description="None: idle gaps are not capped")
    token_low: int
    token_high: int
    marker_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0)
    start_ratio: tuple[float, float] = Field(
        description="range of the sampled start point of a lane's first session, as fractions of its main chain"
    )
    request_fields: dict[str, Any] = Field(
        default_factory=dict, description="extra JSON fields a server needs, e.g. logit_bias"
    )
    api: API = "completions"
    tokenizer: str | None = Field(default=None, description="chat: the tokenizer.json that turns prompts to text")
    far_context: FarContextSettings | None = Field(
        default=None, description="far-context carriers placed in the prompts (None: none)"
    )
    prompt_seed: int | None = Field(
        default=None,
        exclude=True,
        repr=False,
        description="the prompts' content seed; None: the public one of `seed`. "
        "Verification passes one drawn from the operator's secret, "
        "which is never written out with the settings",
    )

    @classmethod
    def for_serving(
        cls,
        serving: ServingCore,
        base_url: str,
        concurrency: int,
        seed: int,
        request_fields: dict[str, Any],
        prompt_seed: int | None = None,
    ) -> ReplaySettings:
        """A replay of ``seed`` as ``serving`` configures it; ``prompt_seed`` None: its prompts' public
        content seed (development, calibration), else the held-out one verification draws from the
        operator's secret."""
        r, w = serving.replay, serving.workload
        low, high = w.token_id_range
        return cls(
            base_url=base_url,
            model=serving.deployment.name,
            concurrency=concurrency,
            seed=seed,
            warmup_s=r.warmup_s,
            window_s=r.window_s,
            request_timeout_s=r.request_timeout_s,
            idle_cap_s=r.idle_cap_s,
            token_low=low,
            token_high=high,
            marker_tokens=w.marker_tokens,
            temperature=r.temperature,
            start_ratio=r.start_ratio,
            request_fields=request_fields,
            far_context=w.far_context,
            prompt_seed=prompt_seed,
        )

    def prompt_builder(self) -> PromptBuilder:
        """The prompts this replay sends (the same for the same content seed and concurrency)."""
        seed = public_prompt_seed(self.seed) if self.prompt_seed is None else self.prompt_seed
        return PromptBuilder(
            token_low=self.token_low,
            token_high=self.token_high,
            marker_tokens=self.marker_tokens,
            content_seed=seed,
            concurrency=self.concurrency,
            carriers=self.far_context,
        )
