#!/usr/bin/env bash
# Installs dependencies, builds everything (CUDA code too when nvcc is
# present), fetches the default model for the end-to-end tests, and runs
# every test. The output ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
deploy/build.sh
TANDEM_SMOLLM2_GGUF="$(deploy/fetch_model.sh)"
export TANDEM_SMOLLM2_GGUF
BUILD="${TANDEM_BUILD_DIR:-build}"
cd "$BUILD"
ctest --output-on-failure -j "${TANDEM_JOBS:-2}" --timeout 900
