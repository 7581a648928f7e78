#!/usr/bin/env bash
# Configures and builds Tandem into build/ (or $TANDEM_BUILD_DIR).
# Usage: deploy/build.sh [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${TANDEM_BUILD_DIR:-build}"
JOBS="${TANDEM_JOBS:-2}"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}"
fi
cmake --build "$BUILD" -j "$JOBS" ${1:+--target "$@"}
