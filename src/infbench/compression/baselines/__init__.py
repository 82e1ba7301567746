"""Baseline packages: the starter (BF16), GGUF quantizations, uniform GPTQ."""
