#include "coordinator/planner/testing/planner_test_models.h"

#include <cstdint>
#include <string>

#include "common/json_util.h"
#include "common/status_macros.h"

namespace tandem::planner::testing {

ModelConfig Mixtral8x7B() {
  ModelConfig c;
  c.arch = Arch::kMixtral;
  c.arch_name = "mixtral";
  c.vocab_size = 32000;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.moe_intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.max_position = 32768;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 1e6f;
  return c;
}

ModelConfig Mixtral8x22B() {
  ModelConfig c = Mixtral8x7B();
  c.hidden_size = 6144;
  c.intermediate_size = 16384;
  c.moe_intermediate_size = 16384;
  c.num_layers = 56;
  c.num_heads = 48;
  c.max_position = 65536;
  return c;
}

ModelConfig Llama2_7B() {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.arch_name = "llama";
  c.vocab_size = 32000;
  c.hidden_size = 4096;
  c.intermediate_size = 11008;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 32;
  c.head_dim = 128;
  c.max_position = 4096;
  c.rms_norm_eps = 1e-5f;
  return c;
}

ModelConfig Llama2_70B() {
  ModelConfig c = Llama2_7B();
  c.hidden_size = 8192;
  c.intermediate_size = 28672;
  c.num_layers = 80;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  return c;
}

HardwareProfile Rtx3090Epyc7742() {
  HardwareProfile p;
  p.name = "rtx3090-epyc7742-test";
  p.gpu.count = 1;
  // NVIDIA RTX 3090 spec "24 GB GDDR6X"; nvidia-smi reports 24576 MiB.
  p.gpu.memory_bytes = int64_t{24576} << 20;
  // GA102 whitepaper, Appendix A: 71 TFLOPS peak FP16 tensor (dense).
  p.gpu.bf16_flops = 71e12;
  // GA102 whitepaper: 936 GB/s (19.5 Gbps GDDR6X, 384-bit).
  p.gpu.memory_bandwidth = 936e9;
  // A CUDA kernel launch from C++ (~5 us; as in
  // profiles/rtx3090-epyc7742.json).
  p.gpu.launch_overhead_s = 5e-6;
  // PCIe 4.0 x16: 31.5 GB/s raw per direction, ~25 GB/s effective for
  // pinned copies; ScheInfer Table I, testbed B: PCIe alpha 5.8e-6 s.
  p.link.h2d_bandwidth = 25e9;
  p.link.d2h_bandwidth = 25e9;
  p.link.h2d_latency_s = 5.8e-6;
  p.link.d2h_latency_s = 5.8e-6;
  // AMD EPYC 7742: 64 cores (AMD spec). Host RAM is not given by ScheInfer:
  // 256 GB assumed, as in profiles/rtx3090-epyc7742.json.
  p.cpu.threads = 64;
  p.cpu.memory_bytes = int64_t{256} * 1000 * 1000 * 1000;
  // 64 Zen 2 cores x ~2.6 GHz x 32 f32 FLOP/cycle = 5.3 TFLOP/s peak; bf16
  // is widened to f32 (no native bf16): ~3.2 attained (profile estimate).
  p.cpu.bf16_flops = 3.2e12;
  p.cpu.f32_flops = 3.5e12;
  // ScheInfer Table I, CPU FP16: beta 1.5e-11 s per element, i.e.
  // 2 B / 1.5e-11 s = 133 GB/s; alpha 3.4e-6 s per call.
  p.cpu.memory_bandwidth = 133e9;
  p.cpu.op_overhead_s = 3.4e-6;
  return p;
}

std::string ShippedModelsDir() { return TANDEM_MODELS_DIR; }
std::string ShippedProfilesDir() { return TANDEM_PROFILES_DIR; }

absl::StatusOr<ModelConfig> ShippedModel(const std::string& name) {
  const std::string path = ShippedModelsDir() + "/" + name + ".json";
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, json_util::ReadFile(path));
  return ModelConfigFromHfJson(j, path);
}

absl::StatusOr<HardwareProfile> ShippedProfile(const std::string& name) {
  return LoadHardwareProfile(ShippedProfilesDir() + "/" + name + ".json");
}

}  // namespace tandem::planner::testing
