#!/usr/bin/env bash
# Snakemake runs this inside the new environment, in the directory it runs in
# (the repository root, as in the README); INFBENCH_SRC overrides it.
set -euo pipefail
pip install --no-deps -e "${INFBENCH_SRC:-.}"
