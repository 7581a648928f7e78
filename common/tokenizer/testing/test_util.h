// Test helpers for the tokenizer tests: test data paths, golden files, an
// independent UTF-8 validator, and GGUF tokenizers converted from
// tokenizer.json files.
#ifndef TANDEM_COMMON_TOKENIZER_TESTING_TEST_UTIL_H_
#define TANDEM_COMMON_TOKENIZER_TESTING_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tokenizer/testing/gguf_test_writer.h"
#include "common/tokenizer/tokenizer.h"

namespace tandem::testing {

// tests/data/tokenizers/<rel>.
std::string TokenizerTestData(const std::string& rel);
// The extracted Qwen3 tokenizer directory in the build tree.
std::string Qwen3Dir();
// A fresh path under the test's temporary directory.
std::string TempPath(const std::string& name);

// Tokenizers shared by the tests of one binary (loaded once).
const Tokenizer& Llama2();
const Tokenizer& Qwen3();

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids, ids_no_add, ids_plain;
  std::string decoded, decoded_skip_special;
  bool roundtrip = false;
};
struct Goldens {
  std::string versions;  // the generator's library versions, for messages
  std::vector<GoldenCase> cases;
};
absl::StatusOr<Goldens> LoadGoldens(const std::string& file);

// Strict UTF-8 check written independently of the library's.
bool IsStrictUtf8(const std::string& s);

// Writes `w` to a temporary file and loads it as a tokenizer.
absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(
    const GgufTestWriter& w, const std::string& name);

// GGUF metadata equivalent to a tokenizer.json: "gpt2" (vocab, merges,
// token types from added_tokens, the given pre name) or "llama" (SentencePiece:
// scores derived from the merge ranks, byte/control/unknown types).
absl::StatusOr<GgufTestWriter> GgufFromTokenizerJson(const std::string& path,
                                                     const std::string& model,
                                                     const std::string& pre);

std::string Printable(
    const std::string& s);  // escapes control / non-ASCII bytes

}  // namespace tandem::testing

#endif  // TANDEM_COMMON_TOKENIZER_TESTING_TEST_UTIL_H_
