#!/usr/bin/env bash
# `tandem plan` as a user runs it: the text report names the policy, its
# prediction and the bottleneck; --json is well-formed with every family;
# --trace writes a Chrome trace; a checkpoint directory works as well as a
# config.json; bad input gets a clear error and exit status 1.
set -uo pipefail
TANDEM="$1"
SRC="$2"    # source tree: coordinator/planner/{models,profiles}
DATA="$3"   # test data: models/*_f32 checkpoints
MODELS="$SRC/coordinator/planner/models"
PROFILES="$SRC/coordinator/planner/profiles"
fails=0
passes=0
check() {  # check NAME COND...
  local name="$1"; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
expect_error() {  # expect_error NAME PATTERN ARGS...
  local name="$1" pattern="$2"; shift 2
  local out rc
  out=$("$TANDEM" plan "$@" 2>&1); rc=$?
  if [ "$rc" -ne 1 ] || ! grep -q -- "$pattern" <<<"$out"; then
    echo "FAIL: $name: rc=$rc output: $out"; fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

OUT=$("$TANDEM" plan --model "$MODELS/mixtral-8x7b.json" --hardware "$PROFILES/l4-xeon24.json" \
      --prompt-len 242 --max-prompt-len 256 --gen-len 50 --trace "$tmp/trace.json")
check "plan ran" test $? -eq 0
echo "$OUT"
check "report names the policy" grep -q "^policy: " <<<"$OUT"
check "report has the prediction" grep -q "^predicted: .* tokens/s" <<<"$OUT"
check "report has the bottleneck" grep -q "^bottleneck: " <<<"$OUT"
check "report lists the runners-up" grep -q "Klotski" <<<"$OUT"
check "trace is Chrome trace JSON with complete events" python3 -c "
import json,sys; t=json.load(open(sys.argv[1])); ev=t['traceEvents']
assert any(e['ph']=='X' for e in ev); assert all('ts' in e and 'dur' in e for e in ev if e['ph']=='X')" "$tmp/trace.json"

J=$("$TANDEM" plan --model "$MODELS/llama-2-70b.json" --hardware "$PROFILES/rtx3090-epyc7742.json" \
    --workload online --slo-itl-ms 2000 --prompt-len 512 --gen-len 128 --json)
check "json plan ran" test $? -eq 0
check "json has the best policy and every family" python3 -c "
import json,sys; j=json.loads(sys.argv[1])
assert j['best']['family'] not in ('', 'SCHEDULE_FAMILY_UNSPECIFIED')
assert len(j['families']) == 7, len(j['families'])
assert j['workload']['objective'] == 'online'
p = j['best']['prediction']; assert p['throughput_tokens_per_s'] > 0" "$J"

# A checkpoint directory (its config.json and weight dtype) on a machine
# without a GPU: only the host device can run it.
cat > "$tmp/cpu.json" <<'P'
{ "name": "cpu-only", "cpu": { "threads": 2, "memory_gb": 24, "f32_tflops": 0.1,
  "bf16_tflops": 0.2, "memory_bandwidth_gbs": 10 } }
P
OUT=$("$TANDEM" plan --model "$DATA/models/mixtral_f32" --hardware "$tmp/cpu.json" \
      --prompt-len 16 --gen-len 8)
check "checkpoint plan ran" test $? -eq 0
check "cpu-only machine uses the host device" grep -q "^policy: *host device" <<<"$OUT"

expect_error "missing model" "cannot\|not found\|No such\|does not exist" \
  --model "$tmp/nope.json" --hardware "$PROFILES/t4-xeon24.json" --prompt-len 8 --gen-len 8
expect_error "bad profile field" "unknown field" --model "$MODELS/mixtral-8x7b.json" \
  --hardware <(echo '{"cpu": {"threads": 2, "memory_gb": 8, "f32_tflops": 1, "memory_bandwidth_gbs": 5, "bogus": 1}}') \
  --prompt-len 8 --gen-len 8
expect_error "online needs an SLO" "slo-itl-ms" --model "$MODELS/mixtral-8x7b.json" \
  --hardware "$PROFILES/t4-xeon24.json" --workload online --prompt-len 8 --gen-len 8
expect_error "bad workload" "offline or online" --model "$MODELS/mixtral-8x7b.json" \
  --hardware "$PROFILES/t4-xeon24.json" --workload batch --prompt-len 8 --gen-len 8
expect_error "zero gen len" "generation length" --model "$MODELS/mixtral-8x7b.json" \
  --hardware "$PROFILES/t4-xeon24.json" --prompt-len 8 --gen-len 0
expect_error "fits nowhere" "no schedule family" --model "$MODELS/mixtral-8x22b.json" \
  --hardware "$tmp/cpu.json" --prompt-len 8 --gen-len 8
expect_error "bad dtype" "unknown dtype" --model "$MODELS/mixtral-8x7b.json" \
  --hardware "$PROFILES/t4-xeon24.json" --prompt-len 8 --gen-len 8 --kv-dtype fp7

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
