#!/usr/bin/env bash
# Generated from pyproject.toml ([tool.infbench.environments.vllm-cpu]) by `python src/infbench/envs.py write`; do not edit.
# Snakemake runs it inside the new environment, in its working directory: the repository, as in the
# README, unless INFBENCH_SRC names it.
set -euo pipefail
src="${INFBENCH_SRC:-.}"
python -m pip install --no-deps -e "$src"
python -m pip uninstall --yes torchvision torchaudio torchcodec
