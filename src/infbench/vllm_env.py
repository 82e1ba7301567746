"""Where the vLLM environment's interpreter is: ``.venv-vllm`` beside the Snakefile (made by
``scripts/setup-env.sh``; docs/vllm.md). vLLM pins its own torch and transformers, so it lives apart from the
pipeline's environment and the steps that need it run under this interpreter."""

from __future__ import annotations

from pathlib import Path

from infbench.errors import InfbenchError

# What vLLM's CPU worker reads of the host before it starts (lscpu's CPU topology, the NUMA nodes' memory): a
# sandbox running vLLM binds these read-only at their own paths (a package's worker and a server alike).
HOST_TOPOLOGY = ("/sys/devices/system/cpu", "/sys/devices/system/node")


class VllmEnvironmentMissing(InfbenchError):
    """A step needs vLLM and ``.venv-vllm`` is not there: the machine's setup, not the package, is at fault."""


def vllm_python() -> Path:
    """The vLLM environment's Python (it may not exist: the environment is optional)."""
    return Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python"


def require_vllm_python() -> Path:
    """The vLLM environment's Python; :class:`VllmEnvironmentMissing` saying how to make it where it is absent."""
    python = vllm_python()
    if not python.exists():
        raise VllmEnvironmentMissing(
            f"{python}: the vLLM environment is not installed; `bash scripts/setup-env.sh` makes it (docs/vllm.md)"
        )
    return python


def python_with_vllm() -> Path:
    """An interpreter that imports vLLM: this one where it does (a job run in the ``vllm`` conda environment,
    ``--sdm conda``), else the vLLM environment's (:func:`require_vllm_python`)."""
    import importlib.util
    import sys

    if importlib.util.find_spec("vllm") is not None:
        return Path(sys.executable)
    return require_vllm_python()


def host_topology() -> tuple[str, ...]:
    """The paths of :data:`HOST_TOPOLOGY` this host has."""
    return tuple(p for p in HOST_TOPOLOGY if Path(p).exists())
