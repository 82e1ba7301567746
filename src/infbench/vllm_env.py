"""Where the vLLM environment's interpreter is: ``.venv-vllm`` beside the Snakefile (made by
``scripts/setup-env.sh``; docs/vllm.md). vLLM pins its own torch and transformers, so it lives apart from the
pipeline's environment and the steps that need it run under this interpreter."""

from __future__ import annotations

from pathlib import Path


def vllm_python() -> Path:
    """The vLLM environment's Python (it may not exist: the environment is optional)."""
    return Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
