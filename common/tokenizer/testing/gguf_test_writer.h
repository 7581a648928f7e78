// Test-only: writes GGUF files holding metadata only (no tensors), so tests
// can build GGUF tokenizers (tiny hand-made ones, or one converted from a
// tokenizer.json) without model files.
#ifndef TANDEM_COMMON_TOKENIZER_TESTING_GGUF_TEST_WRITER_H_
#define TANDEM_COMMON_TOKENIZER_TESTING_GGUF_TEST_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/testing/checkpoint_writer.h"

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
  GgufMetadata md_;
};

}  // namespace tandem::testing

#endif  // TANDEM_COMMON_TOKENIZER_TESTING_GGUF_TEST_WRITER_H_
