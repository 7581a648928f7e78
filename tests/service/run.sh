#!/usr/bin/env bash
# Runs one Python service test with the test interpreter: the virtual
# environment deploy/setup.sh makes (Debian's numpy + the `openai` client
# from PyPI), or $TANDEM_TEST_PYTHON.
set -euo pipefail
PY="${TANDEM_TEST_PYTHON:-$HOME/.cache/tandem/test-venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "FAIL: no test Python at $PY; run deploy/setup.sh (or set TANDEM_TEST_PYTHON)"
  echo "0 passed, 1 failed"
  exit 1
fi
script="$1"; shift
exec "$PY" "$(dirname "$0")/$script" "$@"
