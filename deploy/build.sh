#!/usr/bin/env bash
# Configures and builds Tandem into build/ (or $TANDEM_BUILD_DIR).
# Usage: deploy/build.sh [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${TANDEM_BUILD_DIR:-build}"
JOBS="${TANDEM_JOBS:-2}"
if [ ! -f "$BUILD/build.ninja" ]; then
  # A full build with CUDA takes about 1.6 GB; a disk that runs out mid-build
  # fails in the assembler with little to say why, so say it first.
  free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
  if [ -n "$free_kb" ] && [ "$free_kb" -lt 2500000 ]; then
    echo "deploy/build.sh: only $((free_kb / 1024)) MB free here; a full build needs about 1.6 GB" >&2
  fi
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}"
fi
cmake --build "$BUILD" -j "$JOBS" ${1:+--target "$@"}
