#!/usr/bin/env bash
# `tandem serve` as users run it, on loopback with the default model: a chat
# answer, a streamed completion, greedy text equal to `tandem generate`,
# errors, health and metrics; a killed gpu_worker is restarted and serving
# resumes; SIGTERM stops everything and leaves nothing behind; flags out of
# range are refused.
set -uo pipefail
TANDEM="$1"
MODEL="${TANDEM_SMOLLM2_GGUF:-}"
fails=0
passes=0
check() {
  local name="$1"; shift
  if "$@"; then passes=$((passes + 1)); else echo "FAIL: $name"; fails=$((fails + 1)); fi
}
if [ -z "$MODEL" ]; then
  echo "FAIL: TANDEM_SMOLLM2_GGUF not set (deploy/test.sh sets it)"
  echo "0 passed, 1 failed"
  exit 1
fi
out=$(mktemp); err=$(mktemp)
"$TANDEM" serve --model "$MODEL" --served-model-name smollm2 --port 0 >"$out" 2>"$err" &
SERVE=$!
cleanup() { kill -9 "$SERVE" 2>/dev/null; pkill -9 -P "$SERVE" 2>/dev/null; rm -f "$out" "$err"; }
trap cleanup EXIT
URL=""
for _ in $(seq 1 100); do
  URL=$(sed -n 's/^serving .* on \(http:[^ ]*\)$/\1/p' "$out")
  [ -n "$URL" ] && curl -s -o /dev/null -w '%{http_code}' "$URL/ready" | grep -q 200 && break
  sleep 0.3
done
check "server became ready ($URL)" curl -sf -o /dev/null "$URL/ready"

CHAT=$(curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":24,"temperature":0}')
echo "chat: $CHAT"
check "chat answer names Paris" grep -q "Paris" <<<"$CHAT"

# The same chat again runs from the first one's cached KV blocks (prefix
# caching is on by default) and answers the same.
CHAT2=$(curl -s "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":24,"temperature":0}')
CACHED=$(python3 -c "import sys,json;print(json.loads(sys.argv[1])['usage']['prompt_tokens_details']['cached_tokens'])" "$CHAT2" 2>/dev/null)
SAME=$(python3 -c "import sys,json;a,b=(json.loads(x)['choices'][0]['message']['content'] for x in sys.argv[1:]);print(a==b)" "$CHAT" "$CHAT2" 2>/dev/null)
check "a repeated chat reuses cached KV (cached_tokens $CACHED of $(python3 -c "import sys,json;print(json.loads(sys.argv[1])['usage']['prompt_tokens'])" "$CHAT2" 2>/dev/null))" \
  test "${CACHED:-0}" -gt 0
check "and answers as the first one did" test "$SAME" = True
# Structured outputs. post PATH BODY: the JSON reply. holds REPLY EXPR: True
# when the Python expression EXPR holds of the reply's first choice `c`
# (with json, datetime and re at hand).
post() { curl -s "$URL$1" -H 'Content-Type: application/json' -d "$2"; }
holds() {
  python3 -c "import sys,json,datetime,re
c=json.loads(sys.argv[1])['choices'][0]
print(bool($2))" "$1" 2>/dev/null
}
# JSON mode: the answer is one JSON object and ends with it.
JSON_ANSWER=$(post /v1/chat/completions '{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France? Answer in JSON with the key city."}],"max_tokens":120,"temperature":0,"response_format":{"type":"json_object"}}')
echo "json mode: $JSON_ANSWER"
check "response_format json_object gives a JSON object" test "$(holds "$JSON_ANSWER" \
  "c['finish_reason']=='stop' and isinstance(json.loads(c['message']['content']),dict)")" = True
# A JSON Schema: the answer is an object with exactly the schema's keys.
SCHEMA_ANSWER=$(post /v1/chat/completions '{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":120,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":{"type":"object","properties":{"city":{"type":"string","maxLength":30},"population_millions":{"type":"number"},"is_capital":{"type":"boolean"}},"required":["city","is_capital"]}}}}')
echo "json schema: $SCHEMA_ANSWER"
check "response_format json_schema gives an object of the schema" test "$(holds "$SCHEMA_ANSWER" \
  "c['finish_reason']=='stop' and (lambda o: isinstance(o['city'],str) and len(o['city'])<=30 and isinstance(o['is_capital'],bool) and set(o)<={'city','population_millions','is_capital'})(json.loads(c['message']['content']))")" = True
# The same schema again (clients resend it with every request): the same
# compiled schema and its cached masks give the same greedy answer, and the
# metrics count masks given from the cache.
SCHEMA_AGAIN=$(post /v1/chat/completions '{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":120,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"answer","strict":true,"schema":{"type":"object","properties":{"city":{"type":"string","maxLength":30},"population_millions":{"type":"number"},"is_capital":{"type":"boolean"}},"required":["city","is_capital"]}}}}')
SAME_SCHEMA_ANSWER=$(python3 -c "import sys,json;a,b=(json.loads(x)['choices'][0]['message']['content'] for x in sys.argv[1:]);print(a==b)" "$SCHEMA_ANSWER" "$SCHEMA_AGAIN" 2>/dev/null)
check "the same schema again gives the same answer" test "$SAME_SCHEMA_ANSWER" = True
check "metrics count token masks from the cache" sh -c "curl -s '$URL/metrics' | grep -q '^tandem_structured_masks_total{.*source=\"cache\"} [1-9]'"
DATE_ANSWER=$(post /v1/chat/completions '{"model":"smollm2","messages":[{"role":"user","content":"When was the Eiffel Tower finished?"}],"max_tokens":80,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"event","schema":{"type":"object","properties":{"date":{"type":"string","format":"date"},"height_m":{"type":"integer","minimum":100,"maximum":400},"code":{"type":"string","pattern":"^[A-Z]{3}-\\d{2}$"}},"required":["date","height_m","code"]}}}}')
echo "date, bounds and pattern: $DATE_ANSWER"
check "format, minimum/maximum and pattern hold" test "$(holds "$DATE_ANSWER" \
  "c['finish_reason']=='stop' and (lambda o: datetime.date.fromisoformat(o['date']) is not None and 100<=o['height_m']<=400 and re.fullmatch(r'[A-Z]{3}-\d{2}',o['code']) is not None)(json.loads(c['message']['content']))")" = True
COMPLETION_JSON=$(post /v1/completions '{"model":"smollm2","prompt":"The list of the three primary colors as JSON:","max_tokens":60,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"colors","schema":{"type":"array","items":{"enum":["red","green","blue","yellow"]},"minItems":3,"maxItems":3}}}}')
check "and on /v1/completions ($COMPLETION_JSON)" test "$(holds "$COMPLETION_JSON" \
  "c['finish_reason']=='stop' and (lambda a: len(a)==3 and set(a)<={'red','green','blue','yellow'})(json.loads(c['text']))")" = True
# tool_choice "required": the answer is calls of the tools offered.
TOOL_ANSWER=$(post /v1/chat/completions '{"model":"smollm2","messages":[{"role":"user","content":"What is the weather in Paris?"}],"max_tokens":80,"temperature":0,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":30}},"required":["city"]}}}],"tool_choice":"required"}')
echo "tool_choice required: $TOOL_ANSWER"
check "tool_choice required answers with calls of the tools" test "$(holds "$TOOL_ANSWER" \
  "c['finish_reason']=='tool_calls' and c['message']['content'] is None and (lambda t: len(t)>=1 and t[0]['function']['name']=='get_weather' and isinstance(json.loads(t[0]['function']['arguments'])['city'],str))(c['message']['tool_calls'])")" = True
BAD_SCHEMA=$(curl -s -w '\n%{http_code}' "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"smollm2","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"a","schema":{"type":"number","multipleOf":3}}}}')
echo "bad schema: $BAD_SCHEMA"
BAD_OK=$(python3 -c "
import sys,json
body,code=sys.argv[1].rsplit(chr(10),1)
e=json.loads(body)['error']
print(code=='400' and e['param']=='response_format.json_schema.schema' and \"'multipleOf' is not supported\" in e['message'])" "$BAD_SCHEMA" 2>/dev/null)
check "a schema keyword that is not enforced is 400 and named" test "$BAD_OK" = True
check "metrics count prefix cache hits" sh -c "curl -s '$URL/metrics' | grep -q '^vllm:prefix_cache_hits_total{.*} [1-9]'"

# /tokenize counts what the chat endpoint sends the model; /detokenize inverts it.
TOK=$(curl -s "$URL/tokenize" -H 'Content-Type: application/json' \
  -d '{"model":"smollm2","messages":[{"role":"user","content":"What is the capital of France?"}]}')
TOK_COUNT=$(python3 -c "import sys,json;print(json.loads(sys.argv[1])['count'])" "$TOK" 2>/dev/null)
CHAT_PROMPT=$(python3 -c "import sys,json;print(json.loads(sys.argv[1])['usage']['prompt_tokens'])" "$CHAT" 2>/dev/null)
check "/tokenize of the messages counts the chat's prompt tokens ($TOK_COUNT vs $CHAT_PROMPT)" \
  test -n "$TOK_COUNT" -a "$TOK_COUNT" = "$CHAT_PROMPT"
PROMPT=$(curl -s "$URL/apply-template" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"What is the capital of France?"}]}' |
  python3 -c "import sys,json;print(json.load(sys.stdin)['prompt'],end='')" 2>/dev/null)
check "/apply-template renders the chat prompt ('${PROMPT:0:40}...')" \
  grep -q "What is the capital of France?" <<<"$PROMPT"
TEXT='Tokens: naïve café, 12345 — ok?'
IDS=$(curl -s "$URL/tokenize" -H 'Content-Type: application/json' \
  -d "{\"prompt\":\"$TEXT\",\"add_special_tokens\":false}" |
  python3 -c "import sys,json;print(json.dumps(json.load(sys.stdin)['tokens']))" 2>/dev/null)
BACK=$(curl -s "$URL/detokenize" -H 'Content-Type: application/json' -d "{\"tokens\":${IDS:-null}}" |
  python3 -c "import sys,json;print(json.load(sys.stdin)['prompt'])" 2>/dev/null)
check "/detokenize inverts /tokenize ('$BACK')" test "$BACK" = "$TEXT"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/detokenize" -H 'Content-Type: application/json' -d '{"tokens":[99999999]}')
check "/detokenize of an id out of the vocabulary is 400 ($code)" test "$code" = 400

STREAM=$(curl -sN "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model":"smollm2","prompt":"The capital of France is","max_tokens":8,"temperature":0,"stream":true}')
check "stream ends with [DONE]" grep -q '^data: \[DONE\]' <<<"$STREAM"
STREAM_TEXT=$(grep '^data: {' <<<"$STREAM" | sed 's/^data: //' | python3 -c "import sys,json;print(''.join(json.loads(l)['choices'][0]['text'] for l in sys.stdin if l.strip()),end='')")
GEN_TEXT=$("$TANDEM" generate --model "$MODEL" --prompt "The capital of France is" -n 8 --ignore-eos)
check "served greedy text equals tandem generate ('$STREAM_TEXT' vs '$GEN_TEXT')" test "$STREAM_TEXT" = "$GEN_TEXT"

code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions" -H 'Content-Type: application/json' -d '{"model":"smollm2","prompt":')
check "malformed JSON is 400 ($code)" test "$code" = 400
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions" -H 'Content-Type: application/json' -d '{"model":"nope","prompt":"x"}')
check "unknown model is 404 ($code)" test "$code" = 404
check "health is 200" curl -sf -o /dev/null "$URL/health"
check "metrics name vllm:prompt_tokens_total" sh -c "curl -s '$URL/metrics' | grep -q '^vllm:prompt_tokens_total'"

# `tandem bench serve` against it: every request completes with its lengths.
BENCH=$("$TANDEM" bench serve --base-url "$URL" --num-prompts 3 --random-input-len 16 \
  --random-output-len 4 --max-concurrency 2 --ignore-eos --json 2>/dev/null)
BENCH_OK=$(python3 -c "import sys,json;r=json.loads(sys.argv[1]);print(r['completed']==3 and r['total_input_tokens']==48 and r['total_output_tokens']==12 and r['mean_ttft_ms']>0)" "$BENCH" 2>/dev/null)
check "tandem bench serve completes 3 requests of 16 + 4 tokens" test "$BENCH_OK" = True

# Kill the gpu_worker: serve restarts it and requests succeed again.
WORKER=$(pgrep -P "$SERVE" -f "gpu-worker" | head -1)
check "found the gpu_worker child" test -n "$WORKER"
kill -9 "$WORKER" 2>/dev/null
ok=0
for _ in $(seq 1 60); do
  R=$(curl -s "$URL/v1/completions" -H 'Content-Type: application/json' -d '{"model":"smollm2","prompt":"Paris is","max_tokens":4,"temperature":0}')
  grep -q '"finish_reason":"length"' <<<"$R" && { ok=1; break; }
  sleep 0.5
done
check "serving resumes after the gpu_worker is killed" test "$ok" = 1

CHILDREN=$(pgrep -P "$SERVE" | tr '\n' ' ')
kill -TERM "$SERVE"
for _ in $(seq 1 100); do kill -0 "$SERVE" 2>/dev/null || break; sleep 0.1; done
wait "$SERVE"; rc=$?
check "serve exits 0 on SIGTERM ($rc)" test "$rc" = 0
left=0
for p in $CHILDREN; do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
check "no worker process left ($left of: $CHILDREN)" test "$left" = 0
# Flags out of range are refused before anything starts (no silent default).
refused() {  # refused EXPECTED_TEXT FLAGS...: exits non-zero at once, naming the problem
  local want="$1"; shift
  local msg
  msg=$(timeout 30 "$TANDEM" serve --model "$MODEL" --port 0 "$@" 2>&1)
  local code=$?
  [ "$code" -ne 0 ] && [ "$code" -ne 124 ] && grep -q -- "$want" <<<"$msg"
}
check "--max-model-len 0 is refused" refused "must be a whole number > 0, got 0" --max-model-len 0
check "--max-model-len -5 is refused" refused "must be a whole number > 0, got -5" --max-model-len -5
check "--kv-blocks 0 is refused" refused "must be a whole number > 0, got 0" --kv-blocks 0
check "--max-model-len past the model's context is refused" \
  refused "is more than the model's context (8192 positions)" --max-model-len 100000
check "--cpu-experts on a dense model is refused" \
  refused "the model has no routed experts" --cpu-experts all
check "an empty --served-model-name is refused" \
  refused "--served-model-name: must not be empty" --served-model-name ""
check "--tool-call-parser mistral without [TOOL_CALLS] in the vocabulary is refused" \
  refused "vocabulary has no \[TOOL_CALLS\] token" --tool-call-parser mistral
check "llama.cpp's -ngl short of every layer is refused, naming Tandem's flags" \
  refused "n-gpu-layers 5 of the model's 30 layers: Tandem keeps every layer's attention" -ngl 5
check "llama.cpp's -ot on a dense model is refused" \
  refused "override-tensor: the model has no routed experts" -ot "exps=CPU"
check "an unknown --tool-call-parser is refused" \
  refused "tool-call-parser: pythonic not in" --tool-call-parser pythonic
# A value from a TANDEM_ARG_ variable or a --config file is named as such.
export TANDEM_ARG_MAX_NUM_SEQS=0
check "an error names the variable that set the flag" \
  refused "--max-num-seqs=0 was set by TANDEM_ARG_MAX_NUM_SEQS"
unset TANDEM_ARG_MAX_NUM_SEQS
CONFIG=$(mktemp --suffix .yaml)
printf 'max-num-seqs: 0\n' >"$CONFIG"
check "an error names the config file that set the flag" \
  refused "--max-num-seqs=0 was set by --config $CONFIG" --config "$CONFIG"
rm -f "$CONFIG"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
