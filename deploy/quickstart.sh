#!/usr/bin/env bash
# Installs, builds, obtains the default model (SmolLM2-135M-Instruct), starts
# `tandem serve` and sends it one chat request with curl, then stops it.
# Pass your own question as the first argument; PORT picks the port (8000).
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
deploy/build.sh tandem
MODEL="$(deploy/fetch_model.sh)"
QUESTION="${1:-What is the capital of France? Answer in one sentence.}"
PORT="${PORT:-8000}"
TANDEM="${TANDEM_BUILD_DIR:-build}/cli/tandem"

"$TANDEM" serve --model "$MODEL" --served-model-name smollm2 --port "$PORT" &
SERVE=$!
trap 'kill -TERM $SERVE 2>/dev/null; wait $SERVE 2>/dev/null' EXIT
for _ in $(seq 1 300); do
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/ready" && break
  kill -0 "$SERVE" 2>/dev/null || { echo "tandem serve exited" >&2; exit 1; }
  sleep 0.2
done

BODY=$(python3 -c 'import json,sys; print(json.dumps({"model": "smollm2", "max_tokens": 96, "temperature": 0,
  "messages": [{"role": "user", "content": sys.argv[1]}]}))' "$QUESTION")
REPLY=$(curl -s "http://127.0.0.1:$PORT/v1/chat/completions" \
  -H 'Content-Type: application/json' -d "$BODY")
echo "Q: ${QUESTION}"
echo "A: $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["choices"][0]["message"]["content"])' "$REPLY")"
