// GGUF v3 (and v2) reader: metadata, tensor directory, memory-mapped tensor data.
// Format: magic "GGUF", u32 version, u64 tensor count, u64 kv count, kvs,
// tensor infos (name, n_dims, ne[] innermost-first, ggml type, offset), padding
// to general.alignment (default 32), then data.
#ifndef TANDEM_COMMON_GGUF_H_
#define TANDEM_COMMON_GGUF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/converted_quant.h"
#include "common/mapped_file.h"
#include "common/tensor.h"

namespace tandem {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5,
  kFloat32 = 6, kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11,
  kFloat64 = 12,
};

// One metadata value. Scalars convert between numeric kinds; arrays keep
// their element kind.
class GgufValue {
 public:
  GgufType type = GgufType::kUint8;
  GgufType elem_type = GgufType::kUint8;  // arrays only
  int64_t i = 0;                   // integer and bool scalars
  double f = 0;                    // float scalars
  std::string s;                   // string scalar
  std::vector<int64_t> ints;       // integer/bool arrays
  std::vector<double> floats;      // float arrays
  std::vector<std::string> strings;  // string arrays
  std::vector<GgufValue> items;      // arrays of arrays (elem_type kArray)

  bool is_array() const { return type == GgufType::kArray; }
  bool is_integer() const;  // any integer or bool scalar
  bool is_float() const;
  size_t array_size() const;
};

// "UINT32", "STRING", ... for messages.
std::string_view GgufTypeName(GgufType t);

// ggml tensor type ids (F32=0, F16=1, Q4_0=2, Q4_1=3, Q8_0=8, BF16=30, I32=26).
// nullopt for types Tandem does not read.
std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type);
uint32_t GgmlTypeId(DType t);
// "Q4_K", "IQ2_XXS", ... or "type 123" when unknown.
std::string GgmlTypeName(uint32_t ggml_type);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // outermost-first (reversed from GGUF's ne[])
  // The type Tandem computes in: the stored type, or for the formats it converts (the
  // k-quants, Q5_0, Q5_1, IQ4_NL) the type they become (ConvertedQuantComputeType).
  DType dtype = DType::kF32;
  std::optional<ConvertedQuant> converted;  // set when the file stores a type Tandem converts
  uint64_t offset = 0;  // relative to the start of the data section
  int64_t nbytes = 0;   // bytes stored in the file
};

class GgufFile {
 public:
  // Parses and validates the whole header; every problem is an error naming
  // the file (truncation, bad magic/version, unknown value or tensor type,
  // offsets out of range, misaligned or overlapping tensors, ...).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return kv_; }
  const GgufValue* Find(std::string_view key) const;
  // Typed lookups: NotFound if absent, InvalidArgument if of the wrong kind.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;

  uint32_t alignment() const { return alignment_; }
  // File offset of the data section (tensor offsets are relative to it).
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // A view of the tensor's bytes inside the mapping. For a converted tensor only the
  // description (dtype, shape and nbytes after conversion) is filled in, with `data`
  // null: GgufCheckpoint converts the bytes (StoredData) when they are used.
  TensorView View(const GgufTensorInfo& info) const;
  // The tensor's bytes as stored (info.nbytes of them).
  const uint8_t* StoredData(const GgufTensorInfo& info) const;

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue, std::less<>> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  const uint8_t* data_ = nullptr;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_GGUF_H_
