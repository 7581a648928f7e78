// Fuzz-style robustness: valid GGUF files and HF directories, truncated at
// random lengths and with random bytes flipped, must open as an error or as a
// valid checkpoint whose tensors all lie inside the files, never crash. A
// fresh seed each run (printed, and in every failure message).
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>

#include "common/checkpoint.h"
#include "common/checkpoint_schema.h"
#include "common/gguf.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/tiny_models.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

namespace tt = tandem::testing;

constexpr int kIterations = 300;

uint32_t FreshSeed(const char* test) {
  const uint32_t seed = std::random_device{}();
  std::cout << test << " seed: " << seed << std::endl;  // visible even if the test crashes
  return seed;
}

// Touches every byte of every tensor the config needs; returns a checksum so
// the reads are not optimised away.
uint64_t TouchAll(const Checkpoint& c) {
  uint64_t sum = 0;
  auto touch = [&sum](const TensorView& v) {
    const auto* p = static_cast<const uint8_t*>(v.data);
    for (int64_t i = 0; i < v.nbytes; ++i) sum += p[i];
  };
  for (const ExpectedTensor& e : ExpectedTensors(c.config())) {
    if (e.expert) {
      for (int64_t x = 0; x < c.config().num_experts; ++x) {
        auto v = c.ExpertTensor(e.name, x);
        EXPECT_TRUE(v.ok()) << v.status();
        if (v.ok()) touch(*v);
      }
    } else {
      auto v = c.Tensor(e.name);
      EXPECT_TRUE(v.ok()) << v.status();
      if (v.ok()) touch(*v);
    }
  }
  return sum;
}

// Mutates `bytes`: truncation (mode 0), flips inside the first `hot` bytes,
// the headers (mode 1), both (mode 2), or flips anywhere (mode 3).
std::string Mutate(const std::string& bytes, size_t hot, std::mt19937& rng) {
  std::string b = bytes;
  const int mode = static_cast<int>(rng() % 4);
  if (mode == 0 || mode == 2) b.resize(rng() % bytes.size());
  if (mode != 0 && !b.empty()) {
    const size_t limit = mode == 3 ? b.size() : std::min(hot, b.size());
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips; ++i) {
      const size_t pos = rng() % limit;
      if (rng() % 2) {
        b[pos] = static_cast<char>(b[pos] ^ (1u << (rng() % 8)));
      } else {
        b[pos] = static_cast<char>(rng());
      }
    }
  }
  return b;
}

TEST(CheckpointFuzz, MutatedGgufNeverCrashes) {
  const uint32_t seed = FreshSeed("MutatedGgufNeverCrashes");
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::string dir = tt::MakeTempDir("fuzz_gguf");
  const ModelConfig c = tt::TinyConfig(Arch::kQwen2Moe);
  tt::GgufTensorOptions o;
  o.matrix_dtype = DType::kQ4_1;
  const std::string valid = tt::SerializeGguf(
      tt::GgufMetadataFor(c), tt::ToGgufTensors(c, tt::MakeCanonicalTensors(c, 1), o));
  // The header (metadata + tensor infos) ends where the data begins.
  const std::string path = dir + "/m.gguf";
  ASSERT_TRUE(tt::WriteFileBytes(path, valid).ok());
  size_t header_bytes;
  {
    auto f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok()) << f.status();
    header_bytes = static_cast<size_t>((*f)->data_offset());
  }
  int opened = 0;
  for (int i = 0; i < kIterations; ++i) {
    const std::string bytes = Mutate(valid, header_bytes, rng);
    ASSERT_TRUE(tt::WriteFileBytes(path, bytes).ok());
    auto ck = Checkpoint::Open(path);
    if (!ck.ok()) {
      EXPECT_NE(ck.status().message().find(path), absl::string_view::npos) << ck.status();
      continue;
    }
    ++opened;
    const GgufFile* g = (*ck)->gguf();
    ASSERT_NE(g, nullptr);
    for (const GgufTensorInfo& t : g->tensors()) {
      EXPECT_LE(g->data_offset() + t.offset + static_cast<uint64_t>(t.nbytes), bytes.size())
          << t.name;
    }
    TouchAll(**ck);
  }
  std::cout << "opened " << opened << " of " << kIterations << " mutated GGUF files\n";
  tt::RemoveTree(dir);
}

TEST(CheckpointFuzz, MutatedSafetensorsAndConfigNeverCrash) {
  const uint32_t seed = FreshSeed("MutatedSafetensorsAndConfigNeverCrash");
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const std::string dir = tt::MakeTempDir("fuzz_hf");
  const ModelConfig c = tt::TinyConfig(Arch::kQwen3Moe);
  tt::HfDirOptions dopt;
  dopt.num_shards = 2;
  ASSERT_TRUE(tt::WriteTinyHfModel(dir, c, 1, {}, dopt).ok());
  const std::vector<std::string> files = {"model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors", "config.json",
                                          "model.safetensors.index.json"};
  std::vector<std::string> originals;
  for (const std::string& f : files) {
    std::string s;
    std::FILE* fp = std::fopen((dir + "/" + f).c_str(), "rb");
    ASSERT_NE(fp, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), fp)) > 0) s.append(buf, n);
    std::fclose(fp);
    originals.push_back(s);
  }
  int opened = 0;
  for (int i = 0; i < kIterations; ++i) {
    // Mostly the weights; sometimes the JSON files.
    const size_t which = rng() % 8 < 6 ? rng() % 2 : 2 + rng() % 2;
    const std::string& orig = originals[which];
    size_t hot = orig.size();
    if (which < 2) {
      uint64_t header_len;
      std::memcpy(&header_len, orig.data(), 8);
      hot = 8 + static_cast<size_t>(header_len);
    }
    const std::string path = dir + "/" + files[which];
    ASSERT_TRUE(tt::WriteFileBytes(path, Mutate(orig, hot, rng)).ok());
    auto ck = Checkpoint::Open(dir);
    if (ck.ok()) {
      ++opened;
      TouchAll(**ck);
    } else {
      EXPECT_NE(ck.status().message().find(dir), absl::string_view::npos) << ck.status();
    }
    ASSERT_TRUE(tt::WriteFileBytes(path, orig).ok());
  }
  std::cout << "opened " << opened << " of " << kIterations << " mutated HF directories\n";
  tt::RemoveTree(dir);
}

}  // namespace
}  // namespace tandem
