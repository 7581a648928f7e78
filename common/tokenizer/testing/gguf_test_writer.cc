#include "common/tokenizer/testing/gguf_test_writer.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tandem::testing {
namespace {
constexpr uint32_t kUint32 = 4, kInt32 = 5, kFloat32 = 6, kBool = 7,
                   kString = 8, kArray = 9;
}  // namespace

void GgufTestWriter::U32(uint32_t v) {
  kv_.append(reinterpret_cast<const char*>(&v), 4);
}
void GgufTestWriter::U64(uint64_t v) {
  kv_.append(reinterpret_cast<const char*>(&v), 8);
}
void GgufTestWriter::Str(const std::string& s) {
  U64(s.size());
  kv_ += s;
}
void GgufTestWriter::Key(const std::string& key) {
  Str(key);
  ++count_;
}

void GgufTestWriter::AddString(const std::string& key, const std::string& v) {
  Key(key);
  U32(kString);
  Str(v);
}
void GgufTestWriter::AddUint32(const std::string& key, uint32_t v) {
  Key(key);
  U32(kUint32);
  U32(v);
}
void GgufTestWriter::AddBool(const std::string& key, bool v) {
  Key(key);
  U32(kBool);
  kv_.push_back(v ? 1 : 0);
}
void GgufTestWriter::AddStringArray(const std::string& key,
                                    const std::vector<std::string>& v) {
  Key(key);
  U32(kArray);
  U32(kString);
  U64(v.size());
  for (const auto& s : v) Str(s);
}
void GgufTestWriter::AddInt32Array(const std::string& key,
                                   const std::vector<int32_t>& v) {
  Key(key);
  U32(kArray);
  U32(kInt32);
  U64(v.size());
  for (int32_t x : v) U32(static_cast<uint32_t>(x));
}
void GgufTestWriter::AddFloat32Array(const std::string& key,
                                     const std::vector<float>& v) {
  Key(key);
  U32(kArray);
  U32(kFloat32);
  U64(v.size());
  for (float x : v) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    U32(bits);
  }
}

absl::Status GgufTestWriter::WriteTo(const std::string& path) const {
  std::string out = "GGUF";
  auto u32 = [&](uint32_t v) {
    out.append(reinterpret_cast<const char*>(&v), 4);
  };
  auto u64 = [&](uint64_t v) {
    out.append(reinterpret_cast<const char*>(&v), 8);
  };
  u32(3);       // version
  u64(0);       // tensors
  u64(count_);  // kvs
  out += kv_;
  while (out.size() % 32 != 0) out.push_back('\0');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

}  // namespace tandem::testing
