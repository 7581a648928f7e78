#include "gpu_worker/bench/model_costs.h"

#include <cmath>

#include "common/checkpoint_schema.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace tandem::bench {
namespace {

int64_t Params(const ops::LinearWeight& w) { return w.rows() * w.cols(); }

void AddLinear(const ops::LinearWeight& w, int64_t* params, int64_t* bytes) {
  *params += Params(w);
  *bytes += w.nbytes();
}

void AddMlp(const ops::MlpWeights& m, int64_t* params, int64_t* bytes) {
  AddLinear(m.gate, params, bytes);
  AddLinear(m.up, params, bytes);
  AddLinear(m.down, params, bytes);
}

const char* StorageName(ops::WeightStorage s) {
  switch (s) {
    case ops::WeightStorage::kF32:
      return "f32";
    case ops::WeightStorage::kBF16:
    case ops::WeightStorage::kBF16Packed:  // bench_runner.cc names the packing
      return "bf16";
    case ops::WeightStorage::kF16:
      return "f16";
    case ops::WeightStorage::kQ8_0:
    case ops::WeightStorage::kQ8_0Packed:  // bench_runner.cc names the packing
      return "q8_0";
    case ops::WeightStorage::kQ4_0:
    case ops::WeightStorage::kQ4_0Packed:
      return "q4_0";
    case ops::WeightStorage::kQ4_1:
    case ops::WeightStorage::kQ4_1Packed:
      return "q4_1";
  }
  return "?";
}

}  // namespace

absl::StatusOr<ModelCosts> ComputeModelCosts(const Checkpoint& ckpt, const ModelWeights& w) {
  const ModelConfig& cfg = ckpt.config();
  ModelCosts c;
  for (const ExpectedTensor& e : ExpectedTensors(cfg)) {
    const int64_t copies = e.expert ? cfg.num_experts : 1;
    for (int64_t x = 0; x < copies; ++x) {
      TANDEM_ASSIGN_OR_RETURN(TensorView v, e.expert ? ckpt.DescribeExpertTensor(e.name, x)
                                                     : ckpt.DescribeTensor(e.name));
      c.total_params += v.numel();
      TANDEM_ASSIGN_OR_RETURN(const int64_t nb, DTypeBytes(v.dtype, v.numel()));
      c.total_weight_bytes += nb;
    }
  }
  for (const LayerWeights& l : w.layers) {
    AddLinear(l.q, &c.dense_params, &c.dense_bytes);
    AddLinear(l.k, &c.dense_params, &c.dense_bytes);
    AddLinear(l.v, &c.dense_params, &c.dense_bytes);
    AddLinear(l.o, &c.dense_params, &c.dense_bytes);
    if (!l.moe) {
      AddMlp(l.mlp, &c.dense_params, &c.dense_bytes);
      continue;
    }
    ++c.moe_layers;
    AddLinear(l.router, &c.dense_params, &c.dense_bytes);
    if (l.has_shared_expert) AddMlp(l.shared, &c.dense_params, &c.dense_bytes);
    if (!l.experts.empty() && c.expert_params == 0) {
      // Every routed expert of a model has the same shape and dtype.
      AddMlp(l.experts[0], &c.expert_params, &c.expert_bytes);
    }
  }
  AddLinear(w.lm_head, &c.lm_head_params, &c.lm_head_bytes);
  c.num_experts = cfg.num_experts;
  c.experts_per_tok = cfg.num_experts_per_tok;
  c.kv_bytes_per_token = 2 * cfg.num_layers * cfg.kv_dim() * static_cast<int64_t>(sizeof(float));
  // q·k and p·v: a multiply-add each per head dimension of every query head.
  c.attn_flops_per_key = 4 * cfg.num_layers * cfg.q_dim();
  TANDEM_ASSIGN_OR_RETURN(c.embed_row_bytes, DTypeBytes(w.token_embd.dtype, cfg.hidden_size));
  if (!w.layers.empty()) c.weight_storage = StorageName(w.layers[0].q.storage());
  return c;
}

Work PrefillWork(const ModelCosts& c, int64_t n, double experts_read) {
  const double tokens = static_cast<double>(n);
  Work w;
  w.expert_flops =
      2.0 * tokens * static_cast<double>(c.experts_per_tok * c.moe_layers * c.expert_params);
  w.flops = 2.0 * tokens * static_cast<double>(c.dense_params) +
            2.0 * static_cast<double>(c.lm_head_params) + w.expert_flops +
            // Causal: token i attends over i + 1 keys.
            static_cast<double>(c.attn_flops_per_key) * tokens * (tokens + 1) / 2;
  w.bytes = static_cast<double>(c.dense_bytes + c.lm_head_bytes) +
            experts_read * static_cast<double>(c.expert_bytes) +
            // Keys and values written once, read back by later tokens
            // from cache; counted once.
            tokens * static_cast<double>(c.kv_bytes_per_token + c.embed_row_bytes);
  return w;
}

Work DecodeWork(const ModelCosts& c, int64_t batch, double keys, double experts_read) {
  const double b = static_cast<double>(batch);
  Work w;
  w.expert_flops = 2.0 * b * static_cast<double>(c.experts_per_tok * c.moe_layers * c.expert_params);
  w.flops = 2.0 * b * static_cast<double>(c.dense_params + c.lm_head_params) + w.expert_flops +
            static_cast<double>(c.attn_flops_per_key) * b * keys;
  w.bytes = static_cast<double>(c.dense_bytes + c.lm_head_bytes) +
            experts_read * static_cast<double>(c.expert_bytes) +
            b * keys * static_cast<double>(c.kv_bytes_per_token) +
            b * static_cast<double>(c.embed_row_bytes);
  return w;
}

double ExpectedDistinctExperts(int64_t experts, int64_t k, int64_t tokens) {
  if (experts <= 0) return 0;
  const double e = static_cast<double>(experts);
  return e * (1.0 - std::pow(1.0 - static_cast<double>(k) / e, static_cast<double>(tokens)));
}

Roofline RooflineOf(const Work& work, double bandwidth_gbs, double peak_gflops,
                    double expert_peak_gflops) {
  Roofline r;
  if (bandwidth_gbs > 0) r.memory_seconds = work.bytes / (bandwidth_gbs * 1e9);
  if (peak_gflops <= 0) return r;
  if (expert_peak_gflops <= 0) {
    r.compute_seconds = work.flops / (peak_gflops * 1e9);
  } else {
    r.compute_seconds = (work.flops - work.expert_flops) / (peak_gflops * 1e9) +
                        work.expert_flops / (expert_peak_gflops * 1e9);
  }
  return r;
}

}  // namespace tandem::bench
