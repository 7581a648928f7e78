// Reader of one .safetensors file: 8-byte little-endian header length, a JSON
// header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__":
// {str: str}}, then the data; offsets are relative to the start of the data.
// The file is memory-mapped and tensor views point into the mapping; they are
// as aligned as the file makes them (standard writers pad the header to 8
// bytes and order tensors so that every element is naturally aligned).
#ifndef TANDEM_COMMON_SAFETENSORS_H_
#define TANDEM_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/mapped_file.h"
#include "common/tensor.h"

namespace tandem {

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost-first
  uint64_t begin = 0;          // byte range in the data section
  uint64_t end = 0;
};

// F32, F16, BF16, I32; Unimplemented (naming the dtype) for any other.
absl::StatusOr<DType> DTypeFromSafetensors(std::string_view name);
// "F32", "F16", "BF16", "I32" (the quantized types have no safetensors name).
std::string_view SafetensorsDTypeName(DType t);

class SafetensorsFile {
 public:
  // Largest header accepted (the reference implementation's limit).
  static constexpr uint64_t kMaxHeaderBytes = 100u << 20;

  // Maps and validates the file: header length and JSON, every entry's dtype,
  // shape and offsets (within the data, matching dtype * shape, no overlaps).
  // Errors name the file: InvalidArgument when malformed, Unimplemented for an
  // unsupported dtype, NotFound when the file does not exist.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;
  TensorView View(const SafetensorsTensor& t) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;  // start of the data section
  uint64_t data_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace tandem

#endif  // TANDEM_COMMON_SAFETENSORS_H_
