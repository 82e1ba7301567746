"""Starter inference code (runtime `python`, interface in docs/submission.md).

The pipeline drives this object as a causal next-token function: `prefill` a batch of prompts, then `step` one
token per row at a time. Return raw logits; the pipeline computes log-probs and picks every generated token.
"""

from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM


class StarterModel:
    def __init__(self, package_dir: str, device: str):
        self.device = torch.device(device)
        self.model = AutoModelForCausalLM.from_pretrained(Path(package_dir) / "model", dtype=torch.bfloat16)
        self.model.to(self.device).eval()
        self.cache = None

    def _forward(self, ids, mask, positions):
        # transformers 5.24 names the KV cache `cache`; earlier 5.x `past_key_values`
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1, **self.cache
        )
        self.cache = {"cache": out.cache} if hasattr(out, "cache") else {"past_key_values": out.past_key_values}
        return out.logits[:, -1]

    @torch.inference_mode()
    def prefill(self, rows: list[np.ndarray], max_new_tokens: int) -> torch.Tensor:
        """A new batch: the logits after each row's last token. Rows are left-padded to a common length."""
        width = max(len(r) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.as_tensor(row)
            mask[i, width - len(row) :] = 1
        self.mask = mask.to(self.device)
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.positions = positions[:, -1]
        self.rows = np.arange(len(rows))
        self.cache = {}
        return self._forward(ids.to(self.device), self.mask, positions)

    @torch.inference_mode()
    def step(self, tokens: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        """One more token for each of `rows` (the rows still going); the logits after it."""
        if not np.array_equal(rows, self.rows):  # rows that ended leave the cache
            keep = torch.as_tensor(np.searchsorted(self.rows, rows), device=self.device)
            next(iter(self.cache.values())).batch_select_indices(keep)
            self.mask, self.positions, self.rows = self.mask[keep], self.positions[keep], rows
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(rows), 1))], dim=1)
        self.positions = self.positions + 1
        ids = torch.as_tensor(tokens, device=self.device).unsqueeze(-1)
        return self._forward(ids, self.mask, self.positions.unsqueeze(-1))

    def release(self) -> None:
        self.cache = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def load(package_dir: str, device: str) -> StarterModel:
    return StarterModel(package_dir, device)
