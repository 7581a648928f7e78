#include "common/converted_cache.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/quant_blocks.h"
#include "common/testing/tiny_models.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

// Each test gets its own cache directory and model directory.
class ConvertedCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::MakeTempDir("converted_cache");
    cache_ = root_ + "/cache";
    setenv("TANDEM_CACHE_DIR", cache_.c_str(), 1);
    unsetenv("TANDEM_CONVERTED_CACHE");
    unsetenv("TANDEM_CONVERTED_CACHE_MAX_GB");
  }
  void TearDown() override {
    unsetenv("TANDEM_CACHE_DIR");
    unsetenv("TANDEM_CONVERTED_CACHE");
    testing::RemoveTree(root_);
  }
  std::string Model(const std::string& name, const std::string& bytes) {
    const std::string p = root_ + "/" + name;
    EXPECT_TRUE(testing::WriteFileBytes(p, bytes).ok());
    return p;
  }
  static std::vector<std::string> Dirs(const std::string& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().string());
    return out;
  }

  std::string root_, cache_;
};

const ConvertedCache::Entry kEntry{"blk.0.ffn_down.weight", 12, DType::kQ4_1, 100};

std::string Bytes(int n, char seed) {
  std::string s(static_cast<size_t>(n), '\0');
  for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<char>(seed + i * 7);
  return s;
}

TEST_F(ConvertedCacheTest, AStoredEntryIsFoundByTheNextProcess) {
  const std::string model = Model("m.gguf", "model bytes");
  auto a = ConvertedCache::ForModel(model);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->Find(kEntry), nullptr);
  const std::string data = Bytes(100, 3);
  auto stored = a->Store(kEntry, data.data());
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>((*stored)->data()) + ConvertedCache::kHeaderBytes,
                  100),
      data);
  // Another instance, as another process would make it, finds the same bytes.
  auto b = ConvertedCache::ForModel(model);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dir(), a->dir());
  auto found = b->Find(kEntry);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(
      std::string(reinterpret_cast<const char*>(found->data()) + ConvertedCache::kHeaderBytes, 100),
      data);
  // An entry is the tensor it says: another type, dtype or size is not it.
  ConvertedCache::Entry type = kEntry, dtype = kEntry, size = kEntry;
  type.ggml_type = 14;
  dtype.dtype = DType::kQ8_0;
  size.nbytes = 99;
  for (const ConvertedCache::Entry& e : {type, dtype, size}) EXPECT_EQ(b->Find(e), nullptr);
  // (Each mismatch removed the entry, to be made again.)
  EXPECT_EQ(b->Find(kEntry), nullptr);
}

TEST_F(ConvertedCacheTest, AChangedOrDeletedModelFileLeavesNothingBehind) {
  const std::string model = Model("m.gguf", "version 1");
  auto a = ConvertedCache::ForModel(model);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Store(kEntry, Bytes(100, 1).data()).ok());
  const std::string old_dir = a->dir();
  // Rewritten (another size): a new key, and the old directory is swept.
  Model("m.gguf", "version 2, longer");
  auto b = ConvertedCache::ForModel(model);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b->dir(), old_dir);
  EXPECT_FALSE(fs::exists(old_dir));
  EXPECT_EQ(b->Find(kEntry), nullptr);
  ASSERT_TRUE(b->Store(kEntry, Bytes(100, 2).data()).ok());
  // Deleted: the next model opened sweeps its directory.
  fs::remove(model);
  auto c = ConvertedCache::ForModel(Model("other.gguf", "x"));
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(fs::exists(b->dir()));
  EXPECT_EQ(Dirs(cache_ + "/converted"), std::vector<std::string>{c->dir()});
}

// TANDEM_CONVERTED_CACHE_MAX_GB: the least recently opened models' conversions go
// first, and never the model being opened.
TEST_F(ConvertedCacheTest, TheSizeCapRemovesTheLeastRecentlyOpenedModels) {
  const ConvertedCache::Entry big{"blk.0.ffn_down.weight", 12, DType::kQ4_1, 400000};
  const std::string data = Bytes(400000, 5);
  const std::string a = Model("a.gguf", "model a"), b = Model("b.gguf", "model b"),
                    c = Model("c.gguf", "model c");
  auto open_and_store = [&](const std::string& model) {
    auto cache = ConvertedCache::ForModel(model);
    EXPECT_NE(cache, nullptr);
    if (cache != nullptr && cache->Find(big) == nullptr) {
      EXPECT_TRUE(cache->Store(big, data.data()).ok());
    }
    return cache != nullptr ? cache->dir() : std::string();
  };
  setenv("TANDEM_CONVERTED_CACHE_MAX_GB", "0.001", 1);  // 10^6 bytes: two entries fit
  const std::string dir_a = open_and_store(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string dir_b = open_and_store(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  open_and_store(a);  // a is now more recent than b
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string dir_c = open_and_store(c);  // 0.8 MB before c's entry: nothing goes
  EXPECT_EQ(Dirs(cache_ + "/converted").size(), 3u);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  open_and_store(c);  // 1.2 MB: b, the least recent, goes
  EXPECT_TRUE(fs::exists(dir_a));
  EXPECT_FALSE(fs::exists(dir_b));
  EXPECT_TRUE(fs::exists(dir_c));
  // A cap below the model being opened leaves that model alone.
  setenv("TANDEM_CONVERTED_CACHE_MAX_GB", "0", 1);
  open_and_store(c);
  EXPECT_FALSE(fs::exists(dir_a));
  EXPECT_TRUE(fs::exists(dir_c));
  // Not a size: no cache, and the reason says why.
  setenv("TANDEM_CONVERTED_CACHE_MAX_GB", "ten", 1);
  std::string why;
  EXPECT_EQ(ConvertedCache::ForModel(c, &why), nullptr);
  EXPECT_NE(why.find("TANDEM_CONVERTED_CACHE_MAX_GB=ten is not a size"), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(dir_c));
  unsetenv("TANDEM_CONVERTED_CACHE_MAX_GB");
}

TEST_F(ConvertedCacheTest, AnEntryThatIsNotWholeIsRemadeNotUsed) {
  const std::string model = Model("m.gguf", "m");
  auto a = ConvertedCache::ForModel(model);
  ASSERT_NE(a, nullptr);
  auto stored = a->Store(kEntry, Bytes(100, 5).data());
  ASSERT_TRUE(stored.ok());
  const std::string path = (*stored)->path();
  stored->reset();
  fs::resize_file(path, ConvertedCache::kHeaderBytes + 50);
  EXPECT_EQ(a->Find(kEntry), nullptr);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(ConvertedCacheTest, TensorNamesStayInsideTheDirectory) {
  auto a = ConvertedCache::ForModel(Model("m.gguf", "m"));
  ASSERT_NE(a, nullptr);
  for (const std::string& name :
       std::vector<std::string>{"../../escape", "a/b", "/abs", "..", std::string(300, 'x')}) {
    ConvertedCache::Entry e = kEntry;
    e.tensor = name;
    auto stored = a->Store(e, Bytes(100, 9).data());
    ASSERT_TRUE(stored.ok()) << name << ": " << stored.status();
    EXPECT_EQ(fs::path((*stored)->path()).parent_path(), fs::path(a->dir())) << name;
    EXPECT_NE(a->Find(e), nullptr) << name;
  }
  EXPECT_FALSE(fs::exists(root_ + "/escape"));
}

TEST_F(ConvertedCacheTest, OffOrUnwritableMeansNoCache) {
  const std::string model = Model("m.gguf", "m");
  setenv("TANDEM_CONVERTED_CACHE", "off", 1);
  std::string why;
  EXPECT_EQ(ConvertedCache::ForModel(model, &why), nullptr);
  EXPECT_EQ(why, "TANDEM_CONVERTED_CACHE=off");
  unsetenv("TANDEM_CONVERTED_CACHE");
  setenv("TANDEM_CACHE_DIR", "/proc/tandem-cannot-write-here", 1);
  EXPECT_EQ(ConvertedCache::ForModel(model, &why), nullptr);
  EXPECT_NE(why.find("/proc/tandem-cannot-write-here"), std::string::npos) << why;
  EXPECT_EQ(ConvertedCache::ForModel(root_ + "/missing.gguf", &why), nullptr);
}

// Processes converting the same model at once each write their own temporary file and
// rename it into place: every reader sees a whole entry.
TEST_F(ConvertedCacheTest, ConcurrentStoresLeaveOneWholeEntry) {
  const std::string model = Model("m.gguf", "m");
  ConvertedCache::Entry big = kEntry;
  big.nbytes = 1 << 20;
  const std::string data = Bytes(static_cast<int>(big.nbytes), 11);
  std::vector<std::thread> writers;
  std::atomic<int> stored{0};
  for (int i = 0; i < 4; ++i) {
    writers.emplace_back([&] {
      auto c = ConvertedCache::ForModel(model);
      if (c == nullptr) return;
      for (int k = 0; k < 5; ++k) {
        if (c->Store(big, data.data()).ok()) ++stored;
        auto m = c->Find(big);
        // Never a torn entry: absent or whole.
        if (m != nullptr) {
          EXPECT_EQ(std::memcmp(m->data() + ConvertedCache::kHeaderBytes, data.data(), data.size()),
                    0);
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(stored.load(), 20);
  auto c = ConvertedCache::ForModel(model);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->Find(big), nullptr);
  // No temporary file is left behind.
  for (const std::string& f : Dirs(c->dir())) {
    EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
  }
}

TEST_F(ConvertedCacheTest, ADirectoryOthersCanWriteIsNotUsed) {
  const std::string model = Model("m.gguf", "m");
  auto a = ConvertedCache::ForModel(model);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(fs::status(a->dir()).permissions() & fs::perms::all, fs::perms::owner_all);
  // Opened up afterwards (by hand, say): the next open closes it again before use, and
  // a directory it cannot close is refused.
  fs::permissions(a->dir(), fs::perms::all);
  auto b = ConvertedCache::ForModel(model);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(fs::status(b->dir()).permissions() & fs::perms::all, fs::perms::owner_all);
  // A symbolic link in place of the model's directory is refused, and what it points
  // to keeps its permissions.
  fs::remove_all(b->dir());
  fs::create_directory(root_ + "/elsewhere");
  fs::permissions(root_ + "/elsewhere", fs::perms::owner_all | fs::perms::group_read);
  fs::create_directory_symlink(root_ + "/elsewhere", b->dir());
  std::string why;
  EXPECT_EQ(ConvertedCache::ForModel(model, &why), nullptr);
  EXPECT_NE(why.find("not a directory of this user's alone"), std::string::npos) << why;
  EXPECT_EQ(fs::status(root_ + "/elsewhere").permissions() & fs::perms::all,
            fs::perms::owner_all | fs::perms::group_read);
}

// Through the checkpoint: the first open converts and stores, the next maps the stored
// bytes (the same as a fresh conversion), and with the cache off the conversion is
// the same again.
TEST_F(ConvertedCacheTest, CheckpointsShareTheirConversions) {
  const ModelConfig c = [] {
    ModelConfig m = testing::TinyConfig(Arch::kQwen2);
    m.hidden_size = 256;
    m.intermediate_size = 256;
    return m;
  }();
  testing::GgufTensorOptions f32;
  f32.matrix_dtype = DType::kF32;
  f32.embedding_dtype = DType::kF32;
  auto tensors = testing::ToGgufTensors(c, testing::MakeCanonicalTensors(c, 1), f32);
  testing::GgufWriteOptions o;
  std::mt19937 rng(5);
  for (auto& t : tensors) {
    if (t.name != "blk.0.ffn_down.weight") continue;
    const auto blocks =
        testing::RandomQuantWeights(ConvertedQuant::kQ4_K, t.numel() / 256, 0.1f, rng);
    t.dtype = DType::kQ4_1;
    t.bytes.assign(blocks.begin(), blocks.end());
    o.type_overrides[t.name] = 12;
  }
  const std::string path = root_ + "/model.gguf";
  ASSERT_TRUE(testing::WriteGguf(path, testing::GgufMetadataFor(c), tensors, o).ok());
  const auto bytes_of = [&](const Checkpoint& ck) {
    auto v = ck.Tensor("blk.0.ffn_down.weight");
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? std::string(static_cast<const char*>(v->data), static_cast<size_t>(v->nbytes))
                  : std::string();
  };
  auto first = Checkpoint::Open(path);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string a = bytes_of(**first);
  const auto dirs = Dirs(cache_ + "/converted");
  ASSERT_EQ(dirs.size(), 1u);
  EXPECT_TRUE(fs::exists(dirs[0] + "/t_blk.0.ffn_down.weight"));
  auto second = Checkpoint::Open(path);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(bytes_of(**second), a);
  setenv("TANDEM_CONVERTED_CACHE", "off", 1);
  auto third = Checkpoint::Open(path);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(bytes_of(**third), a);
  EXPECT_EQ(a.size(), 256u * 256 / 32 * 20);
}

}  // namespace
}  // namespace tandem
