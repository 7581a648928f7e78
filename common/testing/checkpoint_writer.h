// Test-only writers of checkpoint files from in-memory tensors: safetensors
// files, Hugging Face directories (single or sharded), and GGUF v2/v3 files
// with metadata of any value type. The Serialize* functions return the bytes
// so that tests can corrupt them before writing.
#ifndef TANDEM_COMMON_TESTING_CHECKPOINT_WRITER_H_
#define TANDEM_COMMON_TESTING_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "common/gguf.h"
#include "nlohmann/json.hpp"

namespace tandem::testing {

// A tensor to write: name, dtype, outermost-first shape and raw bytes.
struct TestTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;  // DTypeBytes(dtype, numel) bytes

  int64_t numel() const;
  // Converts f32 `values` (numel of them) to `dtype`, quantizing if needed
  // (the innermost dimension must then be a multiple of 32).
  static TestTensor FromF32(std::string name, std::vector<int64_t> shape,
                            const std::vector<float>& values, DType dtype = DType::kF32);
  // Dequantizes/converts the bytes back to f32.
  std::vector<float> ToF32() const;
};

// Deterministic values in [-scale, scale).
std::vector<float> RandomValues(int64_t n, uint32_t seed, float scale = 0.5f);

// Writes `bytes` to `path` (creating or truncating it).
absl::Status WriteFileBytes(const std::string& path, const std::string& bytes);
// A fresh directory under $TEST_TMPDIR (or /tmp), e.g. "/tmp/ckpt_test_XXXXXX".
std::string MakeTempDir(const std::string& prefix);
// Removes a directory tree (best effort).
void RemoveTree(const std::string& path);

// ---- safetensors ----

// A complete file: header (tensors in the given order, data contiguous,
// header padded with spaces to 8 bytes) then data. F32/F16/BF16/I32 only.
std::string SerializeSafetensors(const std::vector<TestTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});
// A file from a raw header text and data bytes (for malformed headers).
std::string SafetensorsFromParts(const std::string& header_json, const std::string& data);
absl::Status WriteSafetensors(const std::string& path, const std::vector<TestTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

struct HfDirOptions {
  int num_shards = 1;  // > 1: model-0000i-of-0000n.safetensors + index
  std::optional<nlohmann::json> generation_config;
  bool write_tokenizer_files = false;  // minimal tokenizer.json + tokenizer_config.json
};
// Creates `dir` (if needed) and writes config.json and the weights.
absl::Status WriteHfDirectory(const std::string& dir, const nlohmann::json& config,
                              const std::vector<TestTensor>& tensors,
                              const HfDirOptions& options = {});

// ---- GGUF ----

using GgufMetadata = std::vector<std::pair<std::string, GgufValue>>;

GgufValue GgufInt(GgufType type, int64_t v);  // any integer type or kBool
GgufValue GgufUint32(uint32_t v);
GgufValue GgufFloat(GgufType type, double v);  // kFloat32 or kFloat64
GgufValue GgufFloat32(float v);
GgufValue GgufBool(bool v);
GgufValue GgufString(std::string v);
GgufValue GgufIntArray(GgufType elem, std::vector<int64_t> v);
GgufValue GgufFloatArray(GgufType elem, std::vector<double> v);
GgufValue GgufStringArray(std::vector<std::string> v);
GgufValue GgufArrayOfArrays(std::vector<GgufValue> items);  // each item an array

struct GgufWriteOptions {
  uint32_t version = 3;
  // Data alignment; a value other than 32 is also written as general.alignment
  // unless the metadata already has that key.
  uint32_t alignment = 32;
  // Corruption hooks for tests: replace a tensor's stored data offset or ggml
  // type id (by tensor name).
  std::map<std::string, uint64_t> offset_overrides;
  std::map<std::string, uint32_t> type_overrides;
};
std::string SerializeGguf(const GgufMetadata& metadata, const std::vector<TestTensor>& tensors,
                          const GgufWriteOptions& options = {});
absl::Status WriteGguf(const std::string& path, const GgufMetadata& metadata,
                       const std::vector<TestTensor>& tensors,
                       const GgufWriteOptions& options = {});

}  // namespace tandem::testing

#endif  // TANDEM_COMMON_TESTING_CHECKPOINT_WRITER_H_
