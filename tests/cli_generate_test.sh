#!/usr/bin/env bash
# `tandem generate` as a user runs it: greedy ids on a golden checkpoint equal
# transformers', the JSON output is well-formed, bad input gets a clear error
# and exit status 1, and the default model answers text.
set -uo pipefail
TANDEM="$1"
DATA="$2"
fails=0
passes=0
check() {  # check NAME COND...
  local name="$1"; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
expect_error() {  # expect_error NAME PATTERN ARGS...
  local name="$1" pattern="$2"; shift 2
  local out rc
  out=$("$TANDEM" generate "$@" 2>&1); rc=$?
  if [ "$rc" -ne 1 ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $name: rc=$rc output: $out"; fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}

MODEL="$DATA/models/llama_f32"
PROMPT=$(python3 -c "import json;g=json.load(open('$MODEL/golden.json'));print(','.join(map(str,g['greedy'][0]['prompt'])))")
WANT=$(python3 -c "import json;g=json.load(open('$MODEL/golden.json'));print(json.dumps(g['greedy'][0]['continuation']))")
N=$(python3 -c "import json;print(len(json.loads('$WANT')))")
OUT=$("$TANDEM" generate --model "$MODEL" --prompt-ids "$PROMPT" --max-tokens "$N" --ignore-eos --json)
check "generate ran" test $? -eq 0
GOT=$(python3 -c "import json,sys;print(json.dumps(json.loads(sys.argv[1])['token_ids']))" "$OUT")
check "greedy ids equal transformers ($GOT vs $WANT)" test "$GOT" = "$WANT"
check "json has usage and finish_reason" python3 -c "
import json,sys; j=json.loads(sys.argv[1]); assert j['usage']['completion_tokens']==$N; assert j['finish_reason']=='length'; assert all(t['logprob']<=0 for t in j['tokens'])" "$OUT"

# Routed experts in a cpu_worker process (all, or split with the engine)
# give the same greedy tokens, for every MoE architecture and dtype.
for arch in mixtral qwen2_moe qwen3_moe olmoe; do
  for dt in f32 bf16; do
    M="$DATA/models/${arch}_${dt}"
    P=$(python3 -c "import json;g=json.load(open('$M/golden.json'));print(','.join(map(str,g['greedy'][0]['prompt'])))")
    W=$(python3 -c "import json;g=json.load(open('$M/golden.json'));print(','.join(map(str,g['greedy'][0]['continuation'])))")
    for spec in all 1-per-layer; do
      G=$("$TANDEM" generate --model "$M" --prompt-ids "$P" -n 16 --ignore-eos --cpu-experts "$spec")
      check "$arch $dt --cpu-experts $spec equals transformers" test "$G" = "$W"
    done
  done
done
leftover=$(ls /dev/shm | grep -cE '^tandem-[0-9]+-experts' || true)
check "no shared-memory segments left behind ($leftover)" test "$leftover" -eq 0

# Seeded sampling is reproducible.
S1=$("$TANDEM" generate --model "$MODEL" --prompt-ids "$PROMPT" -n 8 --temperature 1.0 --seed 7 --ignore-eos)
S2=$("$TANDEM" generate --model "$MODEL" --prompt-ids "$PROMPT" -n 8 --temperature 1.0 --seed 7 --ignore-eos)
check "same seed, same tokens" test "$S1" = "$S2"

expect_error "missing model" "no/such/model" --model /no/such/model --prompt-ids 1
expect_error "bad id text" "is not a token id" --model "$MODEL" --prompt-ids 1,x
expect_error "id out of range" "outside the vocabulary" --model "$MODEL" --prompt-ids 1,999999
expect_error "both prompts" "exactly one" --model "$MODEL" --prompt-ids 1 --prompt hi
expect_error "negative temperature" "temperature" --model "$MODEL" --prompt-ids 1 --temperature -1
expect_error "negative context" "--max-context must be >= 0" --model "$MODEL" --prompt-ids 1 --max-context -5
MODEL_POSITIONS=$(python3 -c "import json;print(json.load(open('$MODEL/config.json'))['max_position_embeddings'])")
expect_error "context past the model's" "more than the model's context ($MODEL_POSITIONS positions)" \
  --model "$MODEL" --prompt-ids 1 --max-context $((MODEL_POSITIONS + 1))
expect_error "cpu experts of a dense model" "no routed experts" --model "$MODEL" --prompt-ids 1 --cpu-experts all
expect_error "text without tokenizer" "tokenizer" --model "$MODEL" --prompt hello
"$TANDEM" generate --bogus-flag >/dev/null 2>&1
check "unknown flag rejected" test $? -ne 0
# Flags from TANDEM_ARG_* variables; the command line wins.
ENV_OUT=$(TANDEM_ARG_MAX_TOKENS=3 TANDEM_ARG_IGNORE_EOS=true "$TANDEM" generate --model "$MODEL" \
  --prompt-ids "$PROMPT" --json)
check "TANDEM_ARG_MAX_TOKENS sets --max-tokens" python3 -c "
import json,sys; assert json.loads(sys.argv[1])['usage']['completion_tokens']==3" "$ENV_OUT"
ENV_OUT=$(TANDEM_ARG_MAX_TOKENS=3 "$TANDEM" generate --model "$MODEL" --prompt-ids "$PROMPT" \
  --max-tokens 2 --ignore-eos --json)
check "--max-tokens beats TANDEM_ARG_MAX_TOKENS" python3 -c "
import json,sys; assert json.loads(sys.argv[1])['usage']['completion_tokens']==2" "$ENV_OUT"
ENV_ERR=$(TANDEM_ARG_MAX_TOKENS=many "$TANDEM" generate --model "$MODEL" --prompt-ids 1 2>&1)
check "a bad TANDEM_ARG_ value is refused ($ENV_ERR)" grep -q "max-tokens" <<<"$ENV_ERR"
# Flags from a --config YAML file: the environment and the command line win.
CFG=$(mktemp --suffix .yaml)
printf 'model: %s\nmax_tokens: 4\nignore-eos: true\njson: yes\n' "$MODEL" >"$CFG"
CFG_OUT=$("$TANDEM" generate --config "$CFG" --prompt-ids "$PROMPT")
check "--config sets the flags" python3 -c "
import json,sys; assert json.loads(sys.argv[1])['usage']['completion_tokens']==4" "$CFG_OUT"
CFG_OUT=$(TANDEM_ARG_MAX_TOKENS=3 "$TANDEM" generate --config "$CFG" --prompt-ids "$PROMPT")
check "TANDEM_ARG_ beats --config" python3 -c "
import json,sys; assert json.loads(sys.argv[1])['usage']['completion_tokens']==3" "$CFG_OUT"
CFG_OUT=$("$TANDEM" generate --config "$CFG" --prompt-ids "$PROMPT" --max-tokens 2)
check "the command line beats --config" python3 -c "
import json,sys; assert json.loads(sys.argv[1])['usage']['completion_tokens']==2" "$CFG_OUT"
printf 'model: %s\nmax-tokenz: 4\n' "$MODEL" >"$CFG"
CFG_ERR=$("$TANDEM" generate --config "$CFG" --prompt-ids 1 2>&1)
check "an unknown --config key is refused ($CFG_ERR)" grep -q "'max-tokenz' is not a flag of tandem generate" <<<"$CFG_ERR"
rm -f "$CFG"
VERSION=$("$TANDEM" --version)
check "--version prints the version ($VERSION)" grep -qx "tandem [0-9][0-9.]*" <<<"$VERSION"

if [ -n "${TANDEM_SMOLLM2_GGUF:-}" ]; then
  ANSWER=$("$TANDEM" generate --model "$TANDEM_SMOLLM2_GGUF" --max-tokens 24 --prompt \
$'<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n')
  echo "SmolLM2 answer: $ANSWER"
  check "SmolLM2 names Paris" grep -q "Paris" <<<"$ANSWER"
else
  echo "FAIL: TANDEM_SMOLLM2_GGUF not set (deploy/test.sh sets it)"; fails=$((fails + 1))
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
