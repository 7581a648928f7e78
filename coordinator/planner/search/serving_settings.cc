#include "coordinator/planner/search/serving_settings.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace tandem::planner {
namespace {

// gg + cg + cc may miss 1 by the solvers' rounding.
constexpr double kSumTolerance = 1e-6;
constexpr int64_t kRowBlock = 32;

bool Fraction(double x) { return x >= 0 && x <= 1; }  // false for NaN

}  // namespace

absl::StatusOr<proto::Policy> ParsePolicyJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("policy: not a JSON object");
  }
  // `tandem plan --json` prints a report whose "best" is the policy.
  if (j.contains("best")) {
    if (!j["best"].is_object()) return absl::InvalidArgumentError("policy: \"best\" is no object");
    j = j["best"];
  }
  proto::Policy p;
  google::protobuf::util::JsonParseOptions o;
  o.ignore_unknown_fields = false;
  const auto st = google::protobuf::util::JsonStringToMessage(j.dump(), &p, o);
  if (!st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("policy: ", std::string(st.message())));
  }
  if (p.family() == proto::SCHEDULE_FAMILY_UNSPECIFIED) {
    return absl::InvalidArgumentError("policy: no schedule family");
  }
  return p;
}

absl::StatusOr<ServingSettings> SettingsFromPolicy(const proto::Policy& p, const ModelConfig& c) {
  ServingSettings s;
  switch (p.family()) {
    case proto::GPU_RESIDENT:
    case proto::HOST_DEVICE:
    case proto::SCHEINFER:
    case proto::HYBRIMOE:
    case proto::NEO:
    case proto::MOE_LIGHTNING:
    case proto::KLOTSKI:
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("policy: unknown schedule family ", static_cast<int>(p.family())));
  }
  if (p.kv_block_tokens() != 0 && p.kv_block_tokens() != kServingKvBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("policy: KV blocks of ", p.kv_block_tokens(),
                                                   " tokens; the service's hold ",
                                                   kServingKvBlockTokens));
  }
  for (int64_t v : {p.batch_size(), p.prefill_token_budget(), p.gpu_kv_blocks(), p.cpu_kv_blocks(),
                    p.prefill_gpu_tokens(), p.micro_batch_size(), int64_t{p.hot_experts()}}) {
    if (v < 0) return absl::InvalidArgumentError("policy: a negative count");
  }
  s.max_num_seqs = p.batch_size();
  s.max_num_batched_tokens = p.prefill_token_budget();
  s.kv_blocks = p.gpu_kv_blocks();
  s.cpu_kv_blocks = p.cpu_kv_blocks();

  // HOST_DEVICE: the device is the CPU, so every share is on it already.
  const int n = p.family() == proto::HOST_DEVICE ? 0 : p.layers_size();
  if (n != 0 && n != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("policy: ", n, " layers; the model has ",
                                                   c.num_layers));
  }
  std::vector<int64_t> cpu_experts(static_cast<size_t>(c.num_layers), 0);  // per layer
  bool uniform = true;   // the same count in every MoE layer
  int64_t first = -1;    // the first MoE layer's count
  int32_t slots = 0;
  bool any_cc = false;
  for (int i = 0; i < n; ++i) {
    const proto::LayerPolicy& lp = p.layers(i);
    if (lp.layer() != i) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy: layer entry ", i, " is for layer ", lp.layer()));
    }
    const double gg = lp.gg_fraction(), cg = lp.cg_fraction(), cc = lp.cc_fraction();
    if (!Fraction(gg) || !Fraction(cg) || !Fraction(cc) ||
        std::abs(gg + cg + cc - 1) > kSumTolerance) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy: layer ", i, " shares GG/CG/CC ", gg, "/", cg, "/", cc,
          " are not fractions summing to 1"));
    }
    if (lp.expert_cache_slots() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("policy: layer ", i, " has negative slots"));
    }
    if (cg > 0 && cg >= gg) s.streamed_ffn_layers.push_back(i);
    if (c.IsMoeLayer(i)) {
      const int64_t e = std::llround(cc * static_cast<double>(c.num_experts));
      cpu_experts[static_cast<size_t>(i)] = e;
      if (first < 0) first = e;
      uniform = uniform && e == first;
      slots = std::max(slots, lp.expert_cache_slots());
      s.cpu_ffn_rows.push_back(0);
      continue;
    }
    int64_t rows = static_cast<int64_t>(cc * static_cast<double>(c.intermediate_size)) /
                   kRowBlock * kRowBlock;
    if (rows >= c.intermediate_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy: layer ", i, " computes its whole MLP on the CPU; the gpu_worker keeps at "
          "least one block of ", kRowBlock, " rows"));
    }
    any_cc = any_cc || rows > 0;
    s.cpu_ffn_rows.push_back(rows);
  }
  if (!any_cc) s.cpu_ffn_rows.clear();
  if (p.family() == proto::SCHEINFER && any_cc) s.prefill_gpu_tokens = p.prefill_gpu_tokens();

  if (p.family() == proto::NEO) s.neo_sub_batches = p.num_micro_batches() == 2;
  if (p.family() == proto::MOE_LIGHTNING) {
    if (p.micro_batch_size() > 0 && p.batch_size() > p.micro_batch_size()) {
      s.micro_batch_size = p.micro_batch_size();
    }
    if (!p.attention_on_gpu()) {
      if (p.cpu_kv_blocks() == 0) {
        return absl::InvalidArgumentError(
            "policy: MOE_LIGHTNING with attention on the CPU but no CPU KV blocks");
      }
      s.kv_pool = "cpu";
    }
  }
  if (p.family() == proto::KLOTSKI) {
    // n batches of batch_size / n sequences: one step's batch, each loaded
    // expert shared by all of them (the cache's plan covers the step).
    if (!c.is_moe()) return absl::InvalidArgumentError("policy: KLOTSKI on a dense model");
    const int32_t hot = std::min<int32_t>(std::max(p.hot_experts(), 1),
                                          static_cast<int32_t>(c.num_experts));
    s.expert_cache_slots = hot;
    s.expert_prefetch = hot;
    s.gpu_experts_only = true;
    s.cpu_experts = "none";
    s.streamed_ffn_layers.clear();  // the cache copies the experts in itself
    if (p.gpu_kv_blocks() == 0 && p.cpu_kv_blocks() > 0) s.kv_pool = "cpu";
    return s;
  }
  if (p.family() == proto::HYBRIMOE) {
    // The cache holds the hot experts; each step splits the activated ones
    // between the device and the cpu_workers, which hold every expert.
    // Without slots (a GPU too small for one expert per layer) every
    // routed expert runs on the cpu_workers.
    if (!c.is_moe()) return absl::InvalidArgumentError("policy: HYBRIMOE on a dense model");
    s.expert_cache_slots = std::min<int32_t>(slots, static_cast<int32_t>(c.num_experts));
    s.cpu_experts = "all";
    s.streamed_ffn_layers.clear();  // the cache places the experts itself
  } else if (first >= 0 && uniform) {
    if (first > 0) {
      s.cpu_experts = first == c.num_experts ? "all" : absl::StrCat(first, "-per-layer");
    }
  } else if (first >= 0) {
    s.cpu_experts = absl::StrJoin(cpu_experts, ",");
  }
  return s;
}

}  // namespace tandem::planner
