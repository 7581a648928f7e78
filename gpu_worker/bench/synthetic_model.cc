#include "gpu_worker/bench/synthetic_model.h"

#include <stdlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_schema.h"
#include "common/mapped_file.h"
#include "common/quant.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "common/tensor_names.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/tiny_models.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

// One stored tensor: where its values come from and how they are stored.
struct Entry {
  std::string name;  // as stored (HF name, or canonical for GGUF)
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  uint32_t seed = 0;
  float scale = 0;  // values in offset + [-scale, scale)
  float offset = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// Elements generated per chunk: a multiple of the 32-element quant block.
constexpr int64_t kChunk = 1 << 20;

// Calls sink(bytes, nbytes) for consecutive chunks of the entry's values in
// its dtype. xorshift64: cheap enough that a 1B model is written in seconds.
template <typename Sink>
absl::Status Generate(const Entry& e, Sink&& sink) {
  uint64_t s = 0x9e3779b97f4a7c15ull ^ (static_cast<uint64_t>(e.seed + 1) * 0xbf58476d1ce4e5b9ull);
  std::vector<float> v;
  std::vector<uint8_t> bytes;
  const int64_t n = e.numel();
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t len = std::min(kChunk, n - at);
    v.resize(static_cast<size_t>(len));
    for (float& x : v) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      x = e.offset + (static_cast<float>(s >> 40) / static_cast<float>(1 << 24) * 2 - 1) * e.scale;
    }
    TANDEM_ASSIGN_OR_RETURN(const int64_t nb, DTypeBytes(e.dtype, len));
    bytes.resize(static_cast<size_t>(nb));
    QuantizeFromF32(e.dtype, v.data(), len, bytes.data());
    TANDEM_RETURN_IF_ERROR(sink(bytes.data(), nb));
  }
  return absl::OkStatus();
}

// The entries of the model, one per stored tensor: canonical names for
// GGUF (experts stacked [E, rows, cols]), HF names otherwise (one tensor
// per expert). 1-D tensors (norms) are f32 in GGUF, as llama.cpp stores them.
std::vector<Entry> Entries(const ModelConfig& c, DType dtype, bool gguf, uint32_t seed) {
  std::vector<Entry> out;
  uint32_t s = seed * 7919u;
  for (const ExpectedTensor& t : ExpectedTensors(c)) {
    const bool vec = t.shape.size() == 1;
    Entry e;
    e.dtype = vec && gguf ? DType::kF32 : dtype;
    // Unit-variance outputs for unit-variance inputs; norm weights near 1.
    e.scale = vec ? 0.1f : std::sqrt(3.0f / static_cast<float>(t.shape.back()));
    e.offset = vec ? 1.0f : 0.0f;
    if (!t.expert) {
      e.name = gguf ? t.name : HfNameForCanonical(c.arch, t.name);
      e.shape = t.shape;
      e.seed = ++s;
      out.push_back(e);
    } else if (gguf) {
      e.name = t.name + ".weight";
      e.shape = t.shape;
      e.shape.insert(e.shape.begin(), c.num_experts);
      e.seed = ++s;
      out.push_back(e);
    } else {
      for (int64_t x = 0; x < c.num_experts; ++x) {
        e.name = HfNameForCanonical(c.arch, t.name, x);
        e.shape = t.shape;
        e.seed = ++s;
        out.push_back(e);
      }
    }
  }
  return out;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// A safetensors file written from the entries' generators: the header
// first (sizes are known up front), then each tensor's data in turn.
absl::Status WriteSafetensors(const std::string& path, const std::vector<Entry>& entries) {
  nlohmann::json header = nlohmann::json::object();
  int64_t offset = 0;
  for (const Entry& e : entries) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t nb, DTypeBytes(e.dtype, e.numel()));
    header[e.name] = {{"dtype", std::string(SafetensorsDTypeName(e.dtype))},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + nb}}};
    offset += nb;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "wb"));
  if (f == nullptr) return absl::InternalError(absl::StrCat(path, ": cannot create"));
  auto put = [&](const void* p, int64_t n) -> absl::Status {
    if (std::fwrite(p, 1, static_cast<size_t>(n), f.get()) != static_cast<size_t>(n)) {
      return absl::InternalError(absl::StrCat(path, ": write failed (disk full?)"));
    }
    return absl::OkStatus();
  };
  const uint64_t hlen = text.size();
  TANDEM_RETURN_IF_ERROR(put(&hlen, 8));
  TANDEM_RETURN_IF_ERROR(put(text.data(), static_cast<int64_t>(text.size())));
  for (const Entry& e : entries) TANDEM_RETURN_IF_ERROR(Generate(e, put));
  if (std::fclose(f.release()) != 0) return absl::InternalError(absl::StrCat(path, ": close"));
  return absl::OkStatus();
}

absl::Status WriteGgufModel(const std::string& path, const ModelConfig& c,
                            const std::vector<Entry>& entries) {
  std::vector<testing::TestTensor> tensors;
  tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    testing::TestTensor t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = e.shape;
    TANDEM_RETURN_IF_ERROR(Generate(e, [&t](const uint8_t* p, int64_t n) {
      t.bytes.append(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
      return absl::OkStatus();
    }));
    tensors.push_back(std::move(t));
  }
  return testing::WriteGguf(path, testing::GgufMetadataFor(c), tensors);
}

}  // namespace

SyntheticModelSpec DenseSpec() {
  SyntheticModelSpec s;
  s.hidden_size = 2048;
  s.num_layers = 16;
  s.intermediate_size = 5632;
  s.num_heads = 16;
  s.num_kv_heads = 4;
  s.vocab_size = 32000;
  return s;
}

SyntheticModelSpec MoeSpec() {
  SyntheticModelSpec s;
  s.moe = true;
  s.hidden_size = 1024;
  s.num_layers = 8;
  s.intermediate_size = 2816;
  s.num_heads = 16;
  s.num_kv_heads = 4;
  s.vocab_size = 32000;
  s.num_experts = 8;
  s.experts_per_tok = 2;
  return s;
}

absl::StatusOr<ModelConfig> SyntheticConfig(const SyntheticModelSpec& s) {
  if (s.dtype != DType::kF32 && s.dtype != DType::kBF16 && s.dtype != DType::kF16 &&
      s.dtype != DType::kQ8_0 && s.dtype != DType::kQ4_0) {
    return absl::InvalidArgumentError(
        "synthetic model: dtype must be f32, bf16, f16, q8_0 or q4_0");
  }
  if (s.num_heads <= 0 || s.hidden_size <= 0 || s.hidden_size % s.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic model: ", s.num_heads,
                                                   " heads do not divide hidden ", s.hidden_size));
  }
  ModelConfig c;
  c.arch = s.moe ? Arch::kMixtral : Arch::kLlama;
  c.arch_name = std::string(ArchName(c.arch));
  c.vocab_size = s.vocab_size;
  c.hidden_size = s.hidden_size;
  c.intermediate_size = s.intermediate_size;
  c.num_layers = s.num_layers;
  c.num_heads = s.num_heads;
  c.num_kv_heads = s.num_kv_heads;
  c.head_dim = s.hidden_size / s.num_heads;
  c.max_position = 8192;
  c.rms_norm_eps = 1e-5f;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  if (s.moe) {
    c.num_experts = s.num_experts;
    c.num_experts_per_tok = s.experts_per_tok;
    c.moe_intermediate_size = s.intermediate_size;
    c.norm_topk_prob = true;
  }
  TANDEM_RETURN_IF_ERROR(c.Validate());
  if (DTypeIsQuantized(s.dtype) &&
      (c.hidden_size % 32 != 0 || c.intermediate_size % 32 != 0 || c.q_dim() % 32 != 0)) {
    return absl::InvalidArgumentError(
        "synthetic model: quantized weights need hidden, ffn and heads*head_dim multiples of 32");
  }
  return c;
}

absl::StatusOr<std::string> WriteSyntheticModel(const SyntheticModelSpec& s,
                                                const std::string& dir) {
  TANDEM_ASSIGN_OR_RETURN(const ModelConfig c, SyntheticConfig(s));
  const bool gguf = DTypeIsQuantized(s.dtype);
  const std::vector<Entry> entries = Entries(c, s.dtype, gguf, s.seed);
  // Each file leaves the page cache once written, so that the engine maps
  // it as a server maps a model at its first start: read from disk onto the
  // huge pages MappedFile asks for, not onto the 4 KiB pages the writes left
  // cached (those made a 16-row decode step 15% slower, docs/PERFORMANCE.md).
  if (gguf) {
    const std::string path = dir + "/model.gguf";
    TANDEM_RETURN_IF_ERROR(WriteGgufModel(path, c, entries));
    TANDEM_RETURN_IF_ERROR(DropFromPageCache(path));
    return path;
  }
  nlohmann::json config = testing::HfConfigJson(c);
  config["torch_dtype"] = s.dtype == DType::kF32   ? "float32"
                          : s.dtype == DType::kF16 ? "float16"
                                                   : "bfloat16";
  TANDEM_RETURN_IF_ERROR(testing::WriteFileBytes(dir + "/config.json", config.dump(2)));
  TANDEM_RETURN_IF_ERROR(WriteSafetensors(dir + "/model.safetensors", entries));
  TANDEM_RETURN_IF_ERROR(DropFromPageCache(dir + "/model.safetensors"));
  return dir;
}

absl::StatusOr<ScratchDir> ScratchDir::Create(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/", prefix, "_XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat(tmpl, ": cannot create a temporary directory"));
  }
  return ScratchDir(tmpl);
}

ScratchDir& ScratchDir::operator=(ScratchDir&& other) noexcept {
  if (this != &other) {
    Remove();
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

void ScratchDir::Remove() {
  if (path_.empty()) return;
  std::error_code ec;  // best effort: nothing to do about a failure here
  std::filesystem::remove_all(path_, ec);
  path_.clear();
}

}  // namespace tandem::bench
