// Test-only: writes GGUF files holding metadata only (no tensors), so tests
// can build GGUF tokenizers (tiny hand-made ones, or one converted from a
// tokenizer.json) without model files.
#ifndef TANDEM_COMMON_TOKENIZER_TESTING_GGUF_TEST_WRITER_H_
#define TANDEM_COMMON_TOKENIZER_TESTING_GGUF_TEST_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tandem::testing {

class GgufTestWriter {
 public:
  void AddString(const std::string& key, const std::string& v);
  void AddUint32(const std::string& key, uint32_t v);
  void AddBool(const std::string& key, bool v);
  void AddStringArray(const std::string& key,
                      const std::vector<std::string>& v);
  void AddInt32Array(const std::string& key, const std::vector<int32_t>& v);
  void AddFloat32Array(const std::string& key, const std::vector<float>& v);

  absl::Status WriteTo(const std::string& path) const;

 private:
  void Key(const std::string& key);
  void U32(uint32_t v);
  void U64(uint64_t v);
  void Str(const std::string& s);
  std::string kv_;
  uint64_t count_ = 0;
};

}  // namespace tandem::testing

#endif  // TANDEM_COMMON_TOKENIZER_TESTING_GGUF_TEST_WRITER_H_
