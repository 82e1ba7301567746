"""A greedy ``generate_fn`` over a transformers checkpoint (the BF16 source's reference).

Batched, left padding, greedy (``do_sample=False``, one beam, no repetition
penalty or other processors). A row stops at EOS or once its generated text
(never the prompt) contains a stop sequence; the driver cuts completions at
the first stop sequence in any case, so stopping early only saves time.
The prompt is tokenized as the tokenizer does by default (SmolLM2 adds no BOS).
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

from infbench.compression.answers.driver import GenerateFn
from infbench.hf_loading import load_causal_lm


class _StopInGenerated(StoppingCriteria):
    """Done per row when the text generated after the prompt contains a stop sequence."""

    def __init__(self, tokenizer, stop: list[str], prompt_len: int):
        self.tokenizer, self.stop, self.prompt_len = tokenizer, [s for s in stop if s], prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_len :], skip_special_tokens=True)
        done = [any(s in t for s in self.stop) for t in texts]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


def hf_generate_fn(model, tokenizer) -> GenerateFn:
    """``generate_fn`` for a loaded causal LM and its tokenizer; each call is one padded batch."""
    tokenizer.padding_side = "left"
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos_ids))
    device = next(model.parameters()).device

    @torch.inference_mode()
    def generate(prompts: list[str], max_new_tokens: int, stop: list[str]) -> list[str]:
        enc = tokenizer(prompts, return_tensors="pt", padding=True).to(device)
        prompt_len = enc["input_ids"].shape[1]
        config = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, eos_token_id=sorted(eos_ids), pad_token_id=pad
        )
        out = model.generate(
            **enc,
            generation_config=config,
            stopping_criteria=StoppingCriteriaList([_StopInGenerated(tokenizer, stop, prompt_len)]),
        )
        completions = []
        for row in out[:, prompt_len:].tolist():
            end = next((i for i, t in enumerate(row) if t in eos_ids), len(row))
            completions.append(tokenizer.decode(row[:end], skip_special_tokens=True))
        return completions

    return generate


def load_hf_generate_fn(checkpoint: str, dtype: str, device: str) -> GenerateFn:
    from transformers import AutoTokenizer

    return hf_generate_fn(load_causal_lm(checkpoint, dtype, device), AutoTokenizer.from_pretrained(checkpoint))
