"""Greedy generation with stop sequences, and the token ids that end it, for both tracks.

- :func:`eos_ids`: the ids that end a generation, the tokenizer's EOS and every EOS of the checkpoint's
  generation config (one id or a list), whoever generates: the source's reference accuracy ``A(p)``, a
  candidate package (the accuracy gate), the serving reference and the starter server (S0).
- A generation stops at EOS or once the text generated after the prompt (special tokens skipped)
  contains a stop sequence (:func:`stopped`); its completion is the text of the tokens before the first
  EOS, special tokens skipped (:func:`completion_text`). The driver cuts completions at the first stop
  sequence in any case, so stopping early only saves time.
- :func:`greedy`: transformers' ``generate`` on a batch (left padding), greedy (``do_sample=False``,
  one beam, no repetition penalty or other processors): ServerBench's reference answers. CompressionBench's
  ``A(p)`` and accuracy gate drive the model themselves (:mod:`infbench.compression.accuracy`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from pydantic import BaseModel
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from infbench.bf16_on_cpu import float32_weights_held


class Completion(BaseModel):
    """A greedy completion: its text (before the first EOS) and, where the runtime gives them, the generated
    token ids (as generated, EOS included) and the model's log-prob of each."""

    text: str
    tokens: list[int] = []
    logprobs: list[float] = []


# What the driver asks of a runtime (:mod:`.driver`): greedy completions of text prompts, given the token
# budget and the stop sequences
GenerateFn = Callable[[list[str], int, list[str]], list[Completion | str]]


def eos_ids(tokenizer, generation_config: GenerationConfig) -> list[int]:
    """The ids that end a generation: the tokenizer's EOS and the generation config's, sorted."""
    found = {tokenizer.eos_token_id}
    eos = generation_config.eos_token_id
    found |= set(eos if isinstance(eos, list) else [eos])
    return sorted(found - {None})


def checkpoint_generation_config(checkpoint: str | Path) -> GenerationConfig:
    """The generation config a checkpoint's model would hold, without loading its weights: its
    ``generation_config.json``, else the one its ``config.json`` implies."""
    from transformers import AutoConfig

    try:
        return GenerationConfig.from_pretrained(checkpoint)
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(checkpoint))


def _contains_stop(text: str, stop: list[str]) -> bool:
    return any(s in text for s in stop if s)


def stopped(tokenizer, stop: list[str], eos: list[int]) -> Callable[[list[int]], bool]:
    """Whether a generation's tokens so far end it: the last is an EOS, or their text holds a stop
    sequence."""

    def done(tokens: list[int]) -> bool:
        if tokens[-1] in eos:
            return True
        return any(stop) and _contains_stop(tokenizer.decode(tokens, skip_special_tokens=True), stop)

    return done


class StopInGenerated(StoppingCriteria):
    """Done per row when the text generated after the prompt contains a stop sequence."""

    def __init__(self, tokenizer, stop: list[str], prompt_len: int):
        self.tokenizer, self.stop, self.prompt_len = tokenizer, stop, prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_len :], skip_special_tokens=True)
        done = [_contains_stop(t, self.stop) for t in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def completion_text(tokenizer, tokens: list[int], eos: list[int]) -> str:
    """The text of the generated ``tokens`` before the first EOS, special tokens skipped."""
    end = next((i for i, t in enumerate(tokens) if t in eos), len(tokens))
    return tokenizer.decode(tokens[:end], skip_special_tokens=True)


@torch.inference_mode()
def greedy(
    model, tokenizer, inputs: Mapping[str, torch.Tensor], max_new_tokens: int, stop: list[str], eos: list[int]
) -> list[str]:
    """Greedy completions of a batch (``inputs``: ``input_ids`` and ``attention_mask``, left-padded)."""
    prompt_len = inputs["input_ids"].shape[1]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, eos_token_id=eos, pad_token_id=pad
    )
    stopping = StoppingCriteriaList([StopInGenerated(tokenizer, stop, prompt_len)])
    with float32_weights_held(model):
        out = model.generate(**inputs, generation_config=config, stopping_criteria=stopping)
    return [completion_text(tokenizer, row, eos) for row in out[:, prompt_len:].tolist()]
