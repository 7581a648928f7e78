#include "common/shm/expert_weight_store.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace tandem::shm {
namespace {

constexpr int64_t kAlignment = 4096;  // page-aligned: ready to pin for DMA
constexpr int64_t kCompareBytes = 256;

// Calls fn(name, view) for every tensor of the placement.
template <typename Fn>
absl::Status ForEachExpertTensor(const Checkpoint& ckpt,
                                 const std::vector<std::vector<int32_t>>& experts, Fn fn) {
  for (size_t l = 0; l < experts.size(); ++l) {
    for (int32_t e : experts[l]) {
      for (const char* base : kExpertWeightBases) {
        TANDEM_ASSIGN_OR_RETURN(
            TensorView t, ckpt.ExpertTensor(absl::StrCat("blk.", l, ".", base), e));
        TANDEM_RETURN_IF_ERROR(fn(ExpertWeightName(static_cast<int64_t>(l), base, e), t));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ExpertWeightStoreName(const std::string& ring_prefix) {
  return ring_prefix + "-weights";
}

std::string ExpertWeightName(int64_t layer, const std::string& base, int64_t expert) {
  return absl::StrCat("blk.", layer, ".", base, ".", expert);
}

absl::StatusOr<std::unique_ptr<HostWeightStore>> BuildExpertWeightStore(
    const Checkpoint& ckpt, const std::vector<std::vector<int32_t>>& experts,
    const std::string& name) {
  int64_t bytes = 0, count = 0;
  TANDEM_RETURN_IF_ERROR(ForEachExpertTensor(ckpt, experts, [&](const std::string&,
                                                                const TensorView& t) {
    bytes += (t.nbytes + kAlignment - 1) / kAlignment * kAlignment;
    ++count;
    return absl::OkStatus();
  }));
  WeightStoreOptions o;
  o.capacity_bytes = std::max<int64_t>(bytes, kAlignment);
  o.max_tensors = std::max<int64_t>(count, 1);
  o.alignment = kAlignment;
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<HostWeightStore> store, HostWeightStore::Create(name, o));
  TANDEM_RETURN_IF_ERROR(ForEachExpertTensor(ckpt, experts, [&](const std::string& n,
                                                                const TensorView& t) {
    return store
        ->Add(n, t.dtype, t.shape,
              absl::MakeConstSpan(static_cast<const uint8_t*>(t.data),
                                  static_cast<size_t>(t.nbytes)))
        .status();
  }));
  TANDEM_RETURN_IF_ERROR(store->Seal());
  return store;
}

absl::Status VerifyExpertWeightStore(const HostWeightStore& store, const Checkpoint& ckpt,
                                     const std::vector<std::vector<int32_t>>& experts) {
  if (!store.sealed()) {
    return absl::FailedPreconditionError(
        absl::StrCat("host weight store ", store.name(), " is not sealed"));
  }
  return ForEachExpertTensor(ckpt, experts, [&](const std::string& n, const TensorView& want) {
    absl::StatusOr<TensorView> got = store.Lookup(n);
    if (!got.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host weight store ", store.name(), " lacks ", n, ": ", got.status().message()));
    }
    const int64_t head = std::min(want.nbytes, kCompareBytes);
    const auto* a = static_cast<const uint8_t*>(got->data);
    const auto* b = static_cast<const uint8_t*>(want.data);
    if (got->dtype != want.dtype || got->shape != want.shape || got->nbytes != want.nbytes ||
        std::memcmp(a, b, static_cast<size_t>(head)) != 0 ||
        std::memcmp(a + want.nbytes - head, b + want.nbytes - head, static_cast<size_t>(head)) !=
            0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "host weight store ", store.name(), ": ", n, " differs from the checkpoint's"));
    }
    return absl::OkStatus();
  });
}

}  // namespace tandem::shm
