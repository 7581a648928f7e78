// Cross-process HostWeightStore tests: the parent writes tensors, a fork()ed
// child opens the store by name (read-only) and checks every byte.
#include <cstdio>
#include <cstring>
#include <random>

#include "common/shm/host_weight_store.h"
#include "common/shm/testing/shm_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::shm {
namespace {

using testing::ForkedChild;
using ::testing::IsEmpty;

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// A reproducible random model: names, dtypes, shapes (from `seed`).
std::vector<Spec> RandomSpecs(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  const DType dtypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                          DType::kQ4_0, DType::kQ4_1, DType::kI32};
  std::vector<Spec> specs;
  for (int i = 0; i < n; ++i) {
    Spec s;
    s.name = absl::StrCat("model.layers.", i / 7, ".mlp.experts.", i % 7, ".w", rng() % 3);
    s.name += absl::StrCat(".", i);
    s.dtype = dtypes[rng() % 7];
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 64);
    const int64_t cols = 32 * (1 + static_cast<int64_t>(rng() % 16));  // whole quant blocks
    s.shape = rng() % 4 == 0 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
    specs.push_back(std::move(s));
  }
  return specs;
}

uint8_t ByteOf(uint64_t seed, int tensor, size_t i) {
  return static_cast<uint8_t>((seed >> (tensor % 56)) + tensor * 131 + i * 7 + (i >> 8));
}

// Child side: checks every tensor of `specs`; exit status 0 if all match.
int VerifyInChild(const std::string& name, uint64_t seed, const std::vector<Spec>& specs,
                  bool wait_for_seal) {
  auto store = HostWeightStore::Open(name);
  if (!store.ok()) {
    std::fprintf(stderr, "child: %s\n", store.status().ToString().c_str());
    return 2;
  }
  if (wait_for_seal) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!(*store)->sealed()) {
      if (absl::Now() > deadline) return 3;
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  if ((*store)->List().size() != specs.size()) return 4;
  for (size_t t = 0; t < specs.size(); ++t) {
    auto v = (*store)->Lookup(specs[t].name);
    if (!v.ok()) {
      std::fprintf(stderr, "child: %s\n", v.status().ToString().c_str());
      return 5;
    }
    if (v->dtype != specs[t].dtype || v->shape != specs[t].shape) return 6;
    const auto* p = static_cast<const uint8_t*>(v->data);
    for (int64_t i = 0; i < v->nbytes; ++i) {
      if (p[i] != ByteOf(seed, static_cast<int>(t), static_cast<size_t>(i))) {
        std::fprintf(stderr, "child: %s byte %lld differs\n", specs[t].name.c_str(),
                     static_cast<long long>(i));
        return 7;
      }
    }
    auto h = (*store)->Handle(specs[t].name);
    if (!h.ok() || !(*store)->Resolve(*h).ok()) return 8;
  }
  if ((*store)->Lookup("model.missing.weight").status().code() != absl::StatusCode::kNotFound) {
    return 9;
  }
  return 0;
}

class HostWeightStoreXprocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = testing::TestSeed();
    std::fprintf(stderr, "seed=%llu (replay with TANDEM_SHM_TEST_SEED)\n",
                 static_cast<unsigned long long>(seed_));
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "failed with seed=%llu\n", (unsigned long long)seed_);
    EXPECT_THAT(ListSegments(prefix_), IsEmpty()) << prefix_;
  }

  void Write(HostWeightStore& store, const std::vector<Spec>& specs, size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      auto w = store.Allocate(specs[t].name, specs[t].dtype, specs[t].shape);
      ASSERT_TRUE(w.ok()) << w.status();
      for (size_t i = 0; i < w->data.size(); ++i) {
        w->data[i] = ByteOf(seed_, static_cast<int>(t), i);
      }
      ASSERT_TRUE(store.Publish(specs[t].name).ok());
    }
  }

  uint64_t seed_ = 0;
  const std::string prefix_ = testing::UniquePrefix("xwstore");
  const std::string name_ = prefix_ + "w";
};

TEST_F(HostWeightStoreXprocTest, ChildMapsAndVerifiesEveryByte) {
  const auto specs = RandomSpecs(seed_, 300);
  auto store = HostWeightStore::Create(
      name_, {.capacity_bytes = 16 << 20, .max_tensors = 512, .alignment = 4096});
  ASSERT_TRUE(store.ok()) << store.status();
  Write(**store, specs, 0, specs.size());
  ASSERT_TRUE((*store)->Seal().ok());
  auto child = ForkedChild::Start([name = name_, seed = seed_, &specs] {
    return VerifyInChild(name, seed, specs, /*wait_for_seal=*/false);
  });
  EXPECT_EQ(child.Wait(absl::Seconds(20)), 0);
}

TEST_F(HostWeightStoreXprocTest, ChildOpensWhileParentStillLoads) {
  const auto specs = RandomSpecs(seed_, 200);
  auto store = HostWeightStore::Create(name_, {.capacity_bytes = 8 << 20, .max_tensors = 256});
  ASSERT_TRUE(store.ok()) << store.status();
  Write(**store, specs, 0, specs.size() / 2);
  auto child = ForkedChild::Start([name = name_, seed = seed_, &specs] {
    return VerifyInChild(name, seed, specs, /*wait_for_seal=*/true);
  });
  Write(**store, specs, specs.size() / 2, specs.size());
  ASSERT_TRUE((*store)->Seal().ok());
  EXPECT_EQ(child.Wait(absl::Seconds(20)), 0);
}

}  // namespace
}  // namespace tandem::shm
