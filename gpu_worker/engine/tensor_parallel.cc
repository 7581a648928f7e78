#include "gpu_worker/engine/tensor_parallel.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status_macros.h"

namespace tandem {
namespace {

absl::Status Check2d(const TensorView& w) {
  if (w.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", w.name, " is ",
                                                   ShapeString(w.shape), ", not a matrix"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTensorParallel(const ModelConfig& c, const TensorParallel& tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor-parallel rank ", tp.rank, " of ", tp.size, " ranks"));
  }
  if (c.num_heads % tp.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism over ", tp.size, " ranks needs the ", c.num_heads,
        " attention heads to divide evenly"));
  }
  const bool split_kv = c.num_kv_heads % tp.size == 0;
  if (!split_kv && tp.size % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism over ", tp.size, " ranks needs the ", c.num_kv_heads,
        " KV heads to divide evenly or to divide the rank count (then they are replicated)"));
  }
  if (!split_kv && c.qk_norm == QkNorm::kFull) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this model normalises the whole K projection, which cannot be split over ", tp.size,
        " ranks with its ", c.num_kv_heads, " KV heads replicated; use at most ",
        c.num_kv_heads, " ranks"));
  }
  return absl::OkStatus();
}

AttentionShard ShardAttention(const ModelConfig& c, const TensorParallel& tp) {
  AttentionShard s;
  s.heads = c.num_heads / tp.size;
  s.head_begin = tp.rank * s.heads;
  if (c.num_kv_heads % tp.size == 0) {
    s.kv_heads = c.num_kv_heads / tp.size;
    s.kv_head_begin = tp.rank * s.kv_heads;
  } else {
    // size / kv_heads consecutive ranks share a KV head: exactly the ranks
    // whose query heads fall in its group.
    s.kv_heads = 1;
    s.kv_head_begin = tp.rank / (tp.size / c.num_kv_heads);
  }
  return s;
}

absl::StatusOr<int64_t> ShardBegin(int64_t total, const TensorParallel& tp,
                                   const std::string& what) {
  if (total % tp.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor parallelism over ", tp.size,
                                                   " ranks: ", what, " of ", total,
                                                   " does not split evenly"));
  }
  return tp.rank * (total / tp.size);
}

absl::StatusOr<TensorView> SliceRows(const TensorView& w, int64_t begin, int64_t count) {
  TANDEM_RETURN_IF_ERROR(Check2d(w));
  if (begin < 0 || count <= 0 || begin + count > w.dim(0)) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", begin, ", ", begin + count,
                                                   ") of ", w.name, " ", ShapeString(w.shape)));
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t row_bytes, DTypeBytes(w.dtype, w.dim(1)));
  TensorView s = w;
  s.shape = {count, w.dim(1)};
  s.data = static_cast<const uint8_t*>(w.data) + begin * row_bytes;
  s.nbytes = count * row_bytes;
  return s;
}

absl::StatusOr<TensorView> SliceCols(const TensorView& w, int64_t begin, int64_t count,
                                     ShardStorage& storage) {
  TANDEM_RETURN_IF_ERROR(Check2d(w));
  if (begin < 0 || count <= 0 || begin + count > w.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("columns [", begin, ", ", begin + count,
                                                   ") of ", w.name, " ", ShapeString(w.shape)));
  }
  const int64_t block = DTypeBlockElems(w.dtype);
  if (begin % block != 0 || count % block != 0) {
    const std::string where = absl::StrCat("columns [", begin, ", ", begin + count, ")");
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", w.name, " is stored in ", std::string(DTypeName(w.dtype)), " blocks of ", block,
        " values, so ", where, " cannot be split off it: use fewer ranks or a bf16 checkpoint"));
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t row_bytes, DTypeBytes(w.dtype, w.dim(1)));
  TANDEM_ASSIGN_OR_RETURN(const int64_t skip, DTypeBytes(w.dtype, begin));
  TANDEM_ASSIGN_OR_RETURN(const int64_t take, DTypeBytes(w.dtype, count));
  auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(w.dim(0) * take));
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.dim(0); ++r) {
    std::memcpy(buf->data() + r * take, src + r * row_bytes + skip, static_cast<size_t>(take));
  }
  TensorView s = w;
  s.shape = {w.dim(0), count};
  s.data = buf->data();
  s.nbytes = static_cast<int64_t>(buf->size());
  storage.push_back(std::move(buf));
  return s;
}

absl::StatusOr<TensorView> SliceVector(const TensorView& v, int64_t begin, int64_t count) {
  if (DTypeIsQuantized(v.dtype) || begin < 0 || count <= 0 || begin + count > v.numel()) {
    return absl::InvalidArgumentError(absl::StrCat("elements [", begin, ", ", begin + count,
                                                   ") of ", v.name, " ", ShapeString(v.shape)));
  }
  TANDEM_ASSIGN_OR_RETURN(const int64_t skip, DTypeBytes(v.dtype, begin));
  TANDEM_ASSIGN_OR_RETURN(const int64_t take, DTypeBytes(v.dtype, count));
  TensorView s = v;
  s.shape = {count};
  s.data = static_cast<const uint8_t*>(v.data) + skip;
  s.nbytes = take;
  return s;
}

}  // namespace tandem
