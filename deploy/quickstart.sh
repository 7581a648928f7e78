#!/usr/bin/env bash
# Installs, builds, obtains the default model (SmolLM2-135M-Instruct) and
# asks it one question. Pass your own question as the first argument.
set -euo pipefail
cd "$(dirname "$0")/.."
deploy/setup.sh
deploy/build.sh tandem
MODEL="$(deploy/fetch_model.sh)"
QUESTION="${1:-What is the capital of France? Answer in one sentence.}"
# SmolLM2-Instruct speaks ChatML; its special tokens are recognised in the prompt.
PROMPT="<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
<|im_start|>user
${QUESTION}<|im_end|>
<|im_start|>assistant
"
echo "Q: ${QUESTION}"
echo -n "A: "
"${TANDEM_BUILD_DIR:-build}"/cli/tandem generate --model "$MODEL" --prompt "$PROMPT" --max-tokens 96
