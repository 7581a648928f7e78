#include "gpu_worker/bench/attention_bench.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/status_macros.h"
#include "cpu_worker/kv/cpu_kv_cache.h"
#include "cpu_worker/ops/attention.h"

namespace tandem::bench {
namespace {

constexpr int64_t kBlock = 16;

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>(seed >> 8) / static_cast<float>(1 << 24) - 0.5f;
  }
  return v;
}

absl::StatusOr<Figure> AtContext(const ModelConfig& c, const Peaks& peaks,
                                 const AttentionBenchOptions& o, int64_t context) {
  const int64_t row = c.kv_dim(), qd = c.q_dim(), layers = c.num_layers;
  const int64_t keys = context + 1;
  const int64_t seq_bytes = 2 * layers * keys * row * static_cast<int64_t>(sizeof(float));
  const int64_t seqs = std::clamp<int64_t>((o.min_bytes + seq_bytes - 1) / seq_bytes, 1,
                                           std::max<int64_t>(1, o.max_sequences));
  CpuKvShape shape;
  shape.num_layers = layers;
  shape.kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.block_size = kBlock;
  shape.capacity_tokens = seqs * ((keys + kBlock - 1) / kBlock * kBlock);
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CpuKvCache> cache, CpuKvCache::Create(shape));
  std::vector<std::pair<int64_t, int64_t>> needs;
  for (int64_t s = 0; s < seqs; ++s) needs.push_back({s, keys});
  TANDEM_RETURN_IF_ERROR(cache->Reserve(needs));

  // The cached context: the same random rows in every sequence and layer
  // (values do not change the work, and one pool keeps the setup cheap).
  const std::vector<float> pool = Random(context * row, 11);
  for (int64_t l = 0; l < layers; ++l) {
    const ops::PagedKvLayer kv = cache->Layer(l);
    for (int64_t s = 0; s < seqs; ++s) {
      ops::WriteKv(kv, cache->BlockTable(s).data(), 0, context, pool.data(), pool.data());
      cache->SetWritten(s, l, context);
    }
  }

  const std::vector<float> q = Random(seqs * qd, 12), k = Random(seqs * row, 13),
                           v = Random(seqs * row, 14);
  std::vector<float> out(static_cast<size_t>(seqs * qd));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  // One decode token per sequence through every layer, as CpuAttention::Run
  // does it: append each sequence's row, then attend all the sequences in
  // one AttendDecode call, so the threads share all their contexts' chunks.
  std::vector<ops::DecodeQuery> queries(static_cast<size_t>(seqs));
  for (int64_t s = 0; s < seqs; ++s) {
    queries[static_cast<size_t>(s)] = {q.data() + s * qd, cache->BlockTable(s).data(), keys,
                                       out.data() + s * qd};
  }
  auto pass = [&] {
    for (int64_t l = 0; l < layers; ++l) {
      const ops::PagedKvLayer kv = cache->Layer(l);
      for (int64_t s = 0; s < seqs; ++s) {
        ops::WriteKv(kv, queries[static_cast<size_t>(s)].block_table, context, 1,
                     k.data() + s * row, v.data() + s * row);
      }
      ops::AttendDecode(queries.data(), seqs, c.num_heads, kv, scale);
    }
  };
  for (int i = 0; i < o.warmup; ++i) pass();
  std::vector<double> secs;
  RunSamples samples(o.sample_read_gbs);
  for (int i = 0; i < o.repeats; ++i) {
    secs.push_back(perf::TimeRepeats(0, 1, pass)[0]);
    samples.AfterRun();
  }
  Figure f;
  f.sampled_read_gbs = samples.Median();
  f.sequences = seqs;
  f.context = context;
  f.keys = static_cast<double>(keys);
  f.unit_tokens = static_cast<double>(seqs);
  f.rate = perf::Summarize(perf::Rates(static_cast<double>(seqs), secs));
  f.work.bytes = static_cast<double>(seqs * seq_bytes);
  f.work.flops = 4.0 * static_cast<double>(seqs * keys * qd * layers);
  // f32 kernels: the f32 GEMM peak is a generous bound for them.
  f.peak_kind = PeakKind::kF32;
  Score(f, peaks);
  return f;
}

}  // namespace

absl::StatusOr<std::vector<Figure>> RunAttentionBench(const ModelConfig& config, const Peaks& peaks,
                                                      const AttentionBenchOptions& o) {
  if (o.contexts.empty() || o.repeats <= 0 || o.warmup < 0 || o.min_bytes < 0) {
    return absl::InvalidArgumentError("attention bench: contexts and repeats must be given");
  }
  std::vector<Figure> r;
  for (int64_t context : o.contexts) {
    if (context <= 0) return absl::InvalidArgumentError("attention bench: context must be > 0");
    TANDEM_ASSIGN_OR_RETURN(Figure f, AtContext(config, peaks, o, context));
    r.push_back(f);
  }
  return r;
}

}  // namespace tandem::bench
