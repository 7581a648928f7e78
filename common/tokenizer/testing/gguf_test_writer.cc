#include "common/tokenizer/testing/gguf_test_writer.h"

#include "common/testing/checkpoint_writer.h"

namespace tandem::testing {

// Collects typed metadata and hands it to the shared GGUF writer of
// common/testing, so there is one GGUF serializer for all tests.

void GgufTestWriter::AddString(const std::string& key, const std::string& v) {
  md_.emplace_back(key, GgufString(v));
}

void GgufTestWriter::AddUint32(const std::string& key, uint32_t v) {
  md_.emplace_back(key, GgufUint32(v));
}

void GgufTestWriter::AddBool(const std::string& key, bool v) { md_.emplace_back(key, GgufBool(v)); }

void GgufTestWriter::AddStringArray(const std::string& key, const std::vector<std::string>& v) {
  md_.emplace_back(key, GgufStringArray(v));
}

void GgufTestWriter::AddInt32Array(const std::string& key, const std::vector<int32_t>& v) {
  md_.emplace_back(key, GgufIntArray(GgufType::kInt32, std::vector<int64_t>(v.begin(), v.end())));
}

void GgufTestWriter::AddFloat32Array(const std::string& key, const std::vector<float>& v) {
  md_.emplace_back(key, GgufFloatArray(GgufType::kFloat32, std::vector<double>(v.begin(), v.end())));
}

absl::Status GgufTestWriter::WriteTo(const std::string& path) const {
  return WriteGguf(path, md_, {});
}

}  // namespace tandem::testing
