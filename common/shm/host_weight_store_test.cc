#include "common/shm/host_weight_store.h"

#include <cstring>
#include <numeric>
#include <thread>

#include "common/shm/slot_ring.h"
#include "common/shm/testing/shm_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::shm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<uint8_t> Bytes(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

class HostWeightStoreTest : public ::testing::Test {
 protected:
  void TearDown() override { EXPECT_THAT(ListSegments(prefix_), IsEmpty()) << prefix_; }

  std::unique_ptr<HostWeightStore> MakeStore(WeightStoreOptions options) {
    auto store = HostWeightStore::Create(name_, options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  const std::string prefix_ = testing::UniquePrefix("wstore");
  const std::string name_ = prefix_ + "w";
};

TEST_F(HostWeightStoreTest, AddLookupListAndHandles) {
  auto store = MakeStore({.capacity_bytes = 1 << 16, .max_tensors = 16});
  ASSERT_NE(store, nullptr);
  const auto a = Bytes(24, 1);  // f32 [2, 3]
  const auto b = Bytes(34, 7);  // q8_0 [32]: one block
  auto ha = store->Add("layers.0.w", DType::kF32, {2, 3}, a);
  ASSERT_TRUE(ha.ok()) << ha.status();
  auto hb = store->Add("layers.0.q", DType::kQ8_0, {32}, b);
  ASSERT_TRUE(hb.ok()) << hb.status();
  ASSERT_TRUE(store->Add("scalar", DType::kBF16, {}, Bytes(2, 0)).ok());
  ASSERT_TRUE(store->Add("empty", DType::kF16, {0, 5}, {}).ok());

  EXPECT_EQ(ha->segment, name_);
  EXPECT_EQ(ha->bytes, 24u);
  EXPECT_EQ(ha->offset % 4096, 0u);  // the data area is page-aligned
  EXPECT_EQ(hb->offset % 64, 0u);
  EXPECT_EQ(hb->offset, ha->offset + 64);
  EXPECT_EQ(store->num_tensors(), 4);
  EXPECT_EQ(store->used_bytes(), 64 + 64 + 2);

  auto va = store->Lookup("layers.0.w");
  ASSERT_TRUE(va.ok()) << va.status();
  EXPECT_EQ(va->name, "layers.0.w");
  EXPECT_EQ(va->dtype, DType::kF32);
  EXPECT_THAT(va->shape, ElementsAre(2, 3));
  EXPECT_EQ(va->nbytes, 24);
  EXPECT_EQ(std::memcmp(va->data, a.data(), a.size()), 0);
  EXPECT_EQ(va->data, store->segment().base() + ha->offset);

  auto handle = store->Handle("layers.0.q");
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(*handle, *hb);
  auto vb = store->Resolve(*hb);
  ASSERT_TRUE(vb.ok()) << vb.status();
  EXPECT_EQ(std::memcmp(vb->data, b.data(), b.size()), 0);

  std::vector<std::string> names;
  for (const TensorView& v : store->List()) names.push_back(v.name);
  EXPECT_THAT(names, ElementsAre("layers.0.w", "layers.0.q", "scalar", "empty"));
}

TEST_F(HostWeightStoreTest, MissingDuplicateAndBadInputs) {
  auto store = MakeStore({.capacity_bytes = 4096});
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->Add("w", DType::kF32, {1}, Bytes(4, 0)).ok());
  EXPECT_EQ(store->Lookup("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Handle("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Add("w", DType::kF32, {1}, Bytes(4, 0)).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store->Allocate("", DType::kF32, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Allocate(std::string(192, 'n'), DType::kF32, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store->Allocate(std::string(191, 'n'), DType::kF32, {1}).ok());
  EXPECT_EQ(store->Allocate("neg", DType::kF32, {2, -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Allocate("q", DType::kQ4_0, {31}).status().code(),
            absl::StatusCode::kInvalidArgument);  // not whole blocks
  EXPECT_EQ(store->Allocate("rank9", DType::kF32, std::vector<int64_t>(9, 1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Allocate("dt", static_cast<DType>(77), {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Add("short", DType::kF32, {2}, Bytes(4, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);

  WeightStoreOptions bad;
  bad.alignment = 100;
  EXPECT_EQ(HostWeightStore::Create(prefix_ + "bad", bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad.alignment = 64;
  bad.max_tensors = 0;
  EXPECT_EQ(HostWeightStore::Create(prefix_ + "bad", bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(HostWeightStoreTest, CapacityErrorsNameTheTensor) {
  auto store = MakeStore({.capacity_bytes = 1000, .max_tensors = 3});
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->capacity_bytes(), 1000);
  ASSERT_TRUE(store->Allocate("a", DType::kF32, {200}).ok());  // 800 bytes
  auto big = store->Allocate("experts.3.w2", DType::kF32, {50});
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("experts.3.w2"));
  ASSERT_TRUE(store->Allocate("b", DType::kF32, {40}).ok());  // 832 + 160 = 992
  ASSERT_TRUE(store->Allocate("c", DType::kF32, {0}).ok());
  auto dir = store->Allocate("d", DType::kF32, {0});
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(dir.status().message(), HasSubstr("directory"));
}

TEST_F(HostWeightStoreTest, PageAlignment) {
  auto store = MakeStore({.capacity_bytes = 5 * 4096, .alignment = 4096});
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 5; ++i) {
    auto t = store->Allocate(absl::StrCat("t", i), DType::kBF16, {7});
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->handle.offset % 4096, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data.data()) % 4096, 0u);
  }
  EXPECT_EQ(store->Allocate("t5", DType::kBF16, {7}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(HostWeightStoreTest, PublishAndSeal) {
  auto store = MakeStore({.capacity_bytes = 4096});
  ASSERT_NE(store, nullptr);
  auto t = store->Allocate("w", DType::kI32, {4});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data.size(), 16u);
  EXPECT_EQ(store->Lookup("w").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store->List(), IsEmpty());
  EXPECT_EQ(store->Seal().code(), absl::StatusCode::kFailedPrecondition);
  std::memset(t->data.data(), 0x5a, t->data.size());
  ASSERT_TRUE(store->Publish("w").ok());
  EXPECT_EQ(store->Publish("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store->Lookup("w").ok());
  EXPECT_FALSE(store->sealed());
  ASSERT_TRUE(store->Seal().ok());
  EXPECT_TRUE(store->sealed());
  EXPECT_EQ(store->Allocate("x", DType::kI32, {1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(HostWeightStoreTest, PeerSeesTensorsAddedAfterItOpened) {
  auto store = MakeStore({.capacity_bytes = 4096});
  ASSERT_NE(store, nullptr);
  auto peer = HostWeightStore::Open(name_);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_FALSE((*peer)->segment().writable());
  EXPECT_EQ((*peer)->Lookup("late").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store->Add("late", DType::kF32, {2}, Bytes(8, 3)).ok());
  auto v = (*peer)->Lookup("late");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(std::memcmp(v->data, Bytes(8, 3).data(), 8), 0);
  // Only the creator writes.
  auto rw = HostWeightStore::Open(name_, ShmSegment::Access::kReadWrite);
  ASSERT_TRUE(rw.ok());
  EXPECT_EQ((*rw)->Allocate("x", DType::kF32, {1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(HostWeightStoreTest, ResolveRejectsBadHandles) {
  auto store = MakeStore({.capacity_bytes = 4096});
  ASSERT_NE(store, nullptr);
  auto good = store->Add("w", DType::kF32, {4}, Bytes(16, 0));
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(store->Resolve(*good).ok());
  auto bad = *good;
  bad.segment = "/tandem-other";
  EXPECT_EQ(store->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = *good;
  bad.offset = static_cast<uint64_t>(store->segment().size()) - 8;
  EXPECT_EQ(store->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.offset = 0;  // the segment header is not tensor data
  EXPECT_EQ(store->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = *good;
  bad.shape = {5};
  EXPECT_EQ(store->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = *good;
  bad.bytes = ~uint64_t{0};
  EXPECT_EQ(store->Resolve(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(HandleString(*good), HasSubstr("F32 [4]"));
}

TEST_F(HostWeightStoreTest, OnlyOpensWeightStores) {
  RingOptions options;
  auto ring = SlotRing::Create(prefix_ + "ring", RingRole::kProducer, options);
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(HostWeightStore::Open(prefix_ + "ring").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(HostWeightStore::Open(prefix_ + "none").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(HostWeightStoreTest, ConcurrentWritersAndReader) {
  auto store = MakeStore({.capacity_bytes = 1 << 20, .max_tensors = 1024});
  ASSERT_NE(store, nullptr);
  auto peer = HostWeightStore::Open(name_);
  ASSERT_TRUE(peer.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const auto bytes = Bytes(4 * (i % 17 + 1), static_cast<uint8_t>(t * 31 + i));
        EXPECT_TRUE(store
                        ->Add(absl::StrCat("t", t, ".", i), DType::kF32,
                              {static_cast<int64_t>(i % 17 + 1)}, bytes)
                        .ok());
      }
    });
  }
  threads.emplace_back([&] {  // a reader racing the writers
    for (int i = 0; i < 2000; ++i) (void)(*peer)->Lookup(absl::StrCat("t", i % 4, ".", i % 200));
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ((*peer)->List().size(), 800u);
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 200; ++i) {
      auto v = (*peer)->Lookup(absl::StrCat("t", t, ".", i));
      ASSERT_TRUE(v.ok()) << v.status();
      const auto want = Bytes(4 * (i % 17 + 1), static_cast<uint8_t>(t * 31 + i));
      ASSERT_EQ(v->nbytes, static_cast<int64_t>(want.size()));
      EXPECT_EQ(std::memcmp(v->data, want.data(), want.size()), 0);
    }
  }
}

}  // namespace
}  // namespace tandem::shm
