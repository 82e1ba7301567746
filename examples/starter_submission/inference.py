"""Starter inference code (runtime `python`, interface in docs/submission.md)."""

from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM


class StarterModel:
    def __init__(self, package_dir: str, device: str):
        self.device = torch.device(device)
        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / "model", dtype=torch.bfloat16)
        self.model.to(self.device).eval()

    @torch.inference_mode()
    def logits(self, input_ids: np.ndarray, n_last: int) -> np.ndarray:
        ids = torch.as_tensor(input_ids, dtype=torch.long, device=self.device)
        return self.model(input_ids=ids, logits_to_keep=n_last, use_cache=False).logits.float().cpu().numpy()

    @torch.inference_mode()
    def generate(self, input_ids: list[int], max_new_tokens: int):
        ids = torch.as_tensor([input_ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
        for step in range(max_new_tokens):
            token = out.logits[:, -1].argmax(-1)
            yield int(token)
            if step + 1 < max_new_tokens:
                # transformers 5.24 names the KV cache `cache`; earlier 5.x `past_key_values`
                kv = {"cache": out.cache} if hasattr(out, "cache") else {"past_key_values": out.past_key_values}
                out = self.model(input_ids=token.unsqueeze(-1), use_cache=True, **kv)

    def release(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def load(package_dir: str, device: str) -> StarterModel:
    return StarterModel(package_dir, device)
