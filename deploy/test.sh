#!/usr/bin/env bash
# Installs dependencies, builds everything (CUDA code too when nvcc is
# present), fetches the default model for the end-to-end tests, and runs
# every test. The output ends with ctest's summary and one line
# "ctest: N passed, N failed, N skipped" (skipped = GPU tests without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
deploy/build.sh
TANDEM_SMOLLM2_GGUF="$(deploy/fetch_model.sh)"
export TANDEM_SMOLLM2_GGUF
BUILD="${TANDEM_BUILD_DIR:-build}"
cd "$BUILD"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
ctest --output-on-failure -j "${TANDEM_JOBS:-2}" --timeout 900 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
skipped=$(grep -c '(Skipped)$' "$log" || true)
if [ -n "$total" ] && [ -n "$failed" ]; then
  echo "ctest: $((total - failed - skipped)) passed, $failed failed, $skipped skipped"
fi
exit "$rc"
