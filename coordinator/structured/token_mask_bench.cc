// The cost of JSON mode's token masks (and of a JSON Schema's, over Qwen3):
// one mask per generated token, over
// the Qwen3 (151,669 ids) and Llama-2 (32,000 ids) vocabularies, along the
// tokens of a JSON answer; computed afresh for every token, through
// TokenMasker's cache of recent states as the step driver asks for them,
// and for a server's later requests with the same schema.
//
//   build/coordinator/structured/tandem_token_mask_bench
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/tokenizer/testing/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "coordinator/structured/token_mask.h"

namespace tandem::structured {
namespace {

const char kAnswer[] =
    "{\n  \"city\": \"Paris\",\n  \"country\": \"France\",\n  \"population\": 2102650,\n"
    "  \"landmarks\": [\"Eiffel Tower\", \"Louvre\", \"Notre-Dame\"],\n"
    "  \"capital\": true,\n  \"mayor\": {\"name\": \"Anne Hidalgo\", \"since\": 2014}\n}";

// A schema of that answer (response_format json_schema).
const char kSchema[] = R"({"type": "object", "properties": {
    "city": {"type": "string"}, "country": {"type": "string"},
    "population": {"type": "integer"},
    "landmarks": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "capital": {"type": "boolean"},
    "mayor": {"type": "object", "properties": {"name": {"type": "string"},
              "since": {"type": "integer"}}, "required": ["name"]}},
    "required": ["city", "country"]})";

void Run(benchmark::State& state, const Tokenizer& t, bool cached, bool schema = false) {
  using Compiled = absl::StatusOr<std::shared_ptr<const CompiledSchema>>;
  const Compiled compiled =
      schema ? CompiledSchema::Parse(kSchema) : Compiled(CompiledSchema::AnyObject());
  if (!compiled.ok()) {
    state.SkipWithError(std::string(compiled.status().message()).c_str());
    return;
  }
  const std::vector<int32_t> ids = t.Encode(kAnswer, /*add_bos=*/false, /*parse_special=*/false);
  int64_t masks = 0, hits = 0;
  for (auto _ : state) {
    // A new masker for every answer: its cache starts empty, as for the
    // first JSON answer a server gives.
    state.PauseTiming();
    auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
    state.ResumeTiming();
    if (!masker.ok()) {
      state.SkipWithError(std::string(masker.status().message()).c_str());
      return;
    }
    SchemaGrammar g(compiled->get());
    for (int32_t id : ids) {
      benchmark::DoNotOptimize(cached ? (*masker)->AllowedMask(g) : (*masker)->ComputeMask(g));
      g.Feed((*masker)->Bytes(id));
      ++masks;
    }
    hits += (*masker)->cache_hits();
  }
  // Seconds per mask, and the share of masks the cache gave.
  state.counters["per_mask"] = benchmark::Counter(
      static_cast<double>(masks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["hit_rate"] = static_cast<double>(hits) / static_cast<double>(masks);
  state.counters["tokens"] = static_cast<double>(ids.size());
}

void BM_Qwen3Fresh(benchmark::State& s) { Run(s, tandem::testing::Qwen3(), false); }
void BM_Qwen3Cached(benchmark::State& s) { Run(s, tandem::testing::Qwen3(), true); }
void BM_Llama2Fresh(benchmark::State& s) { Run(s, tandem::testing::Llama2(), false); }
void BM_Llama2Cached(benchmark::State& s) { Run(s, tandem::testing::Llama2(), true); }
void BM_Qwen3SchemaFresh(benchmark::State& s) { Run(s, tandem::testing::Qwen3(), false, true); }
void BM_Qwen3SchemaCached(benchmark::State& s) { Run(s, tandem::testing::Qwen3(), true, true); }
BENCHMARK(BM_Qwen3Fresh)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Qwen3Cached)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Llama2Fresh)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Llama2Cached)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Qwen3SchemaFresh)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Qwen3SchemaCached)->Unit(benchmark::kMillisecond);

// A server's later requests with the same response_format: one masker for
// them all, and each request compiles its schema from the text it sent
// (interned, so all share one compiled schema and its cached masks). The
// first iteration pays what BM_Qwen3SchemaCached measures.
void BM_Qwen3SchemaRepeated(benchmark::State& state) {
  const Tokenizer& t = tandem::testing::Qwen3();
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
  if (!masker.ok()) {
    state.SkipWithError(std::string(masker.status().message()).c_str());
    return;
  }
  const std::vector<int32_t> ids = t.Encode(kAnswer, /*add_bos=*/false, /*parse_special=*/false);
  int64_t masks = 0;
  for (auto _ : state) {
    auto compiled = CompiledSchema::Parse(kSchema);
    if (!compiled.ok()) {
      state.SkipWithError(std::string(compiled.status().message()).c_str());
      return;
    }
    SchemaGrammar g(compiled->get());
    for (int32_t id : ids) {
      benchmark::DoNotOptimize((*masker)->AllowedMask(g));
      g.Feed((*masker)->Bytes(id));
      ++masks;
    }
  }
  state.counters["per_mask"] = benchmark::Counter(
      static_cast<double>(masks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["hit_rate"] =
      static_cast<double>((*masker)->cache_hits()) / static_cast<double>(masks);
}
BENCHMARK(BM_Qwen3SchemaRepeated)->Unit(benchmark::kMillisecond);

// One step of 8 requests under the schema, each at its own point of its
// answer and none cached (a new masker each time), their masks made
// together on Arg(0) threads; 16 requests when two share each state.
void BM_Qwen3SchemaStep(benchmark::State& state) {
  const Tokenizer& t = tandem::testing::Qwen3();
  const auto compiled = CompiledSchema::Parse(kSchema);
  if (!compiled.ok()) {
    state.SkipWithError(std::string(compiled.status().message()).c_str());
    return;
  }
  const std::vector<int32_t> ids = t.Encode(kAnswer, /*add_bos=*/false, /*parse_special=*/false);
  const int shared = static_cast<int>(state.range(1));
  std::vector<SchemaGrammar> grammars;
  SchemaGrammar g(compiled->get());
  auto masker = TokenMasker::FromTokenizer(t, t.vocab_size());
  if (!masker.ok()) return;
  for (size_t i = 0; i < ids.size() && grammars.size() < size_t(8 * shared); i += 9) {
    for (int k = 0; k < shared; ++k) grammars.push_back(g);
    for (size_t j = i; j < i + 9 && j < ids.size(); ++j) g.Feed((*masker)->Bytes(ids[j]));
  }
  std::vector<const SchemaGrammar*> states;
  for (const SchemaGrammar& s : grammars) states.push_back(&s);
  for (auto _ : state) {
    state.PauseTiming();
    masker = TokenMasker::FromTokenizer(t, t.vocab_size());
    state.ResumeTiming();
    benchmark::DoNotOptimize((*masker)->AllowedMasks(states, static_cast<int>(state.range(0))));
  }
  state.counters["requests"] = static_cast<double>(states.size());
}
BENCHMARK(BM_Qwen3SchemaStep)
    ->Args({1, 1})
    ->Args({2, 1})
    ->Args({1, 2})
    ->Args({2, 2})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tandem::structured

BENCHMARK_MAIN();
