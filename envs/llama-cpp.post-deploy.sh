#!/usr/bin/env bash
set -euo pipefail
CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install 'llama-cpp-python[server]==0.3.36'
