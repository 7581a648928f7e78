#include "cpu_worker/kv/cpu_attention.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "cpu_worker/ops/attention.h"

namespace tandem {

absl::StatusOr<std::unique_ptr<CpuAttention>> CpuAttention::Create(const CpuAttentionShape& s) {
  if (s.heads <= 0 || s.kv.kv_heads <= 0 || s.heads % s.kv.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("CPU attention: ", s.heads,
                                                   " query heads over ", s.kv.kv_heads,
                                                   " kv heads"));
  }
  if (!(s.scale > 0.0f)) return absl::InvalidArgumentError("CPU attention: scale must be > 0");
  auto a = std::unique_ptr<CpuAttention>(new CpuAttention());
  a->shape_ = s;
  TANDEM_ASSIGN_OR_RETURN(a->cache_, CpuKvCache::Create(s.kv));
  return a;
}

absl::Status CpuAttention::Run(int64_t layer, absl::Span<const CpuAttentionTask> tasks) {
  if (layer < 0 || layer >= shape_.kv.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU attention: layer ", layer, " of ", shape_.kv.num_layers));
  }
  // Check positions against what each sequence will hold when its task
  // runs (earlier tasks of the same call extend it).
  absl::flat_hash_map<int64_t, int64_t> held;
  std::vector<std::pair<int64_t, int64_t>> needs;
  needs.reserve(tasks.size());
  for (const CpuAttentionTask& t : tasks) {
    if (t.tokens <= 0 || t.start_pos < 0 || t.q == nullptr || t.k == nullptr ||
        t.v == nullptr || t.out == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("CPU attention: sequence ", t.seq_id,
                                                     " has an empty or malformed task"));
    }
    auto [it, fresh] = held.try_emplace(t.seq_id, 0);
    if (fresh) it->second = cache_->Written(t.seq_id, layer);
    if (t.start_pos > it->second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CPU attention: sequence ", t.seq_id, " starts at ", t.start_pos, " in layer ", layer,
          " but holds ", it->second, " positions there"));
    }
    it->second = t.start_pos + t.tokens;
    needs.push_back({t.seq_id, t.start_pos + t.tokens});
  }
  TANDEM_RETURN_IF_ERROR(cache_->Reserve(needs));

  const ops::PagedKvLayer kv = cache_->Layer(layer);
  // A run of one-token (decode) tasks of distinct sequences attends in one
  // AttendDecode call, so that the threads share all their contexts' chunks
  // at once. Their keys are all written first: none of them reads another
  // sequence's blocks, so each still sees exactly its own keys.
  std::vector<ops::DecodeQuery> decode;
  absl::flat_hash_set<int64_t> in_run;
  size_t i = 0;
  while (i < tasks.size()) {
    size_t end = i;
    in_run.clear();
    while (end < tasks.size() && tasks[end].tokens == 1 &&
           in_run.insert(tasks[end].seq_id).second) {
      ++end;
    }
    if (end == i) {  // several tokens (prefill): on its own
      const CpuAttentionTask& t = tasks[i];
      const int32_t* table = cache_->BlockTable(t.seq_id).data();
      ops::WriteKv(kv, table, t.start_pos, t.tokens, t.k, t.v);
      ops::AttendSequence(t.q, t.tokens, shape_.heads, kv, table, t.start_pos, shape_.scale, t.out);
      cache_->SetWritten(t.seq_id, layer, t.start_pos + t.tokens);
      ++i;
      continue;
    }
    decode.clear();
    for (size_t j = i; j < end; ++j) {
      const CpuAttentionTask& t = tasks[j];
      const int32_t* table = cache_->BlockTable(t.seq_id).data();
      ops::WriteKv(kv, table, t.start_pos, 1, t.k, t.v);
      decode.push_back({t.q, table, t.start_pos + 1, t.out});
    }
    ops::AttendDecode(decode.data(), static_cast<int64_t>(decode.size()), shape_.heads, kv,
                      shape_.scale);
    for (size_t j = i; j < end; ++j) {
      cache_->SetWritten(tasks[j].seq_id, layer, tasks[j].start_pos + 1);
    }
    i = end;
  }
  return absl::OkStatus();
}

}  // namespace tandem
