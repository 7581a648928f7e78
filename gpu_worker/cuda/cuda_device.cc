#include "gpu_worker/cuda/cuda_device.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "common/status_macros.h"
#include "gpu_worker/cuda/cublas_gemm.h"
#include "gpu_worker/cuda/cuda_copy_engine.h"
#include "gpu_worker/cuda/cuda_status.h"
#include "gpu_worker/cuda/device_info.h"
#include "gpu_worker/cuda/kernels/decode_attention.h"
#include "gpu_worker/cuda/kernels/elementwise.h"
#include "gpu_worker/cuda/kernels/moe_routing.h"
#include "gpu_worker/cuda/kernels/prefill_attention.h"
#include "gpu_worker/cuda/kernels/rms_norm.h"
#include "gpu_worker/cuda/kernels/row_ops.h"
#include "gpu_worker/cuda/kernels/sampling.h"
#include "gpu_worker/engine/model_weights.h"
#include "gpu_worker/engine/pinned_ranges.h"

// A kernel launcher's cudaError_t (as an int) checked like a runtime call.
#define TANDEM_LAUNCH_RETURN_IF_ERROR(stmt) \
  TANDEM_CUDA_RETURN_IF_ERROR(static_cast<cudaError_t>(stmt))

namespace tandem::cuda {
namespace {

// Device memory handed to the engine. Released after the stream has run
// what was queued on it, which may still use it.
class CudaAllocation final : public DeviceAllocation {
 public:
  CudaAllocation(DeviceBuffer b, size_t bytes, cudaStream_t s)
      : b_(std::move(b)), bytes_(bytes), s_(s) {}
  ~CudaAllocation() override { cudaStreamSynchronize(s_); }
  void* data() const override { return b_.data(); }
  size_t size() const override { return bytes_; }

 private:
  DeviceBuffer b_;
  size_t bytes_;
  cudaStream_t s_;
};

DType StorageDType(ops::WeightStorage s) {
  switch (s) {
    case ops::WeightStorage::kF32: return DType::kF32;
    case ops::WeightStorage::kBF16: return DType::kBF16;
    case ops::WeightStorage::kF16: return DType::kF16;
    case ops::WeightStorage::kQ8_0:
    case ops::WeightStorage::kQ8_0Packed: return DType::kQ8_0;
    case ops::WeightStorage::kQ4_0:
    case ops::WeightStorage::kQ4_0Packed: return DType::kQ4_0;
    case ops::WeightStorage::kQ4_1:
    case ops::WeightStorage::kQ4_1Packed: return DType::kQ4_1;
  }
  return DType::kF32;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(int ordinal) {
  std::string why;
  const std::vector<DeviceInfo> devices = ListDevices(&why);
  if (!Lists(devices, ordinal)) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device ", ordinal, " (", devices.size(), " visible",
                     why.empty() ? "" : ": ", why, ")"));
  }
  auto d = std::unique_ptr<CudaDevice>(new CudaDevice(ordinal));
  TANDEM_RETURN_IF_ERROR(d->Use());
  TANDEM_ASSIGN_OR_RETURN(d->stream_, Stream::Create());
  TANDEM_ASSIGN_OR_RETURN(d->blas_, CublasHandle::Create(d->stream_));
  return d;
}

CudaDevice::~CudaDevice() {
  if (stream_.get() != nullptr) cudaStreamSynchronize(stream_.get());
}

std::string CudaDevice::name() const { return absl::StrCat("cuda:", ordinal_); }

absl::Status CudaDevice::Use() const {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  return absl::OkStatus();
}

absl::StatusOr<DeviceMemory> CudaDevice::Allocate(size_t bytes) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(std::max<size_t>(bytes, 1)));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.data(), 0, b.size(), stream_.get()));
  // Waited for: the copy engine's stream may write the memory next (weight
  // staging, expert slots), and must not be overtaken by the zeroing.
  TANDEM_RETURN_IF_ERROR(stream_.Synchronize());
  return DeviceMemory(new CudaAllocation(std::move(b), bytes, stream_.get()));
}

absl::Status CudaDevice::CopyToHost(const void* src, size_t bytes, void* dst) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  return stream_.Synchronize();
}

absl::Status CudaDevice::CopyToDevice(const void* src, size_t bytes, void* dst) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CopyEngine>> CudaDevice::NewCopyEngine() {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CudaCopyEngine> e, CudaCopyEngine::Create(ordinal_));
  return std::unique_ptr<CopyEngine>(std::move(e));
}

absl::Status CudaDevice::Reserve(DeviceBuffer& b, size_t bytes) {
  if (b.size() >= bytes) return absl::OkStatus();
  TANDEM_RETURN_IF_ERROR(stream_.Synchronize());
  b = DeviceBuffer();
  // Grow by half again, so a slowly growing batch reallocates rarely.
  TANDEM_ASSIGN_OR_RETURN(b, DeviceBuffer::Allocate(std::max<size_t>(bytes, bytes / 2 * 3)));
  return absl::OkStatus();
}

absl::StatusOr<void*> CudaDevice::Upload(Slot s, const void* host, size_t bytes) {
  DeviceBuffer& b = meta_[s];
  TANDEM_RETURN_IF_ERROR(Reserve(b, std::max<size_t>(bytes, 256)));
  if (bytes > 0) {
    TANDEM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(b.data(), host, bytes, cudaMemcpyHostToDevice, stream_.get()));
  }
  return b.data();
}

absl::Status CudaDevice::AddParam(const std::vector<float>& v) {
  if (v.empty() || params_.contains(v.data())) return absl::OkStatus();
  const size_t bytes = v.size() * sizeof(float);
  TANDEM_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(b.data(), v.data(), bytes, cudaMemcpyHostToDevice));
  weight_bytes_ += static_cast<int64_t>(bytes);
  params_.emplace(v.data(), std::move(b));
  return absl::OkStatus();
}

absl::Status CudaDevice::AddLinear(const ops::LinearWeight& w) {
  if (w.rows() == 0 || linear_.contains(&w)) return absl::OkStatus();
  DeviceLinear d;
  d.n = w.rows();
  d.k = w.cols();
  const size_t elems = static_cast<size_t>(d.n * d.k);
  if (w.storage() == ops::WeightStorage::kF32 || w.storage() == ops::WeightStorage::kBF16) {
    // Used as they are: f32 weights compute in f32 on the host device too.
    d.type = w.storage() == ops::WeightStorage::kF32 ? ActType::kF32 : ActType::kBF16;
    TANDEM_ASSIGN_OR_RETURN(d.data, DeviceBuffer::Allocate(static_cast<size_t>(w.nbytes())));
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(d.data.data(), w.data(),
                                           static_cast<size_t>(w.nbytes()),
                                           cudaMemcpyHostToDevice));
  } else if (w.storage() == ops::WeightStorage::kF16) {
    // f16 has no GEMM here: widened to f32 (exact), as the engine's own
    // f16 weights are for this device (ops::WeightLayout::kForDevice).
    d.type = ActType::kF32;
    std::vector<float> f(elems);
    ConvertToF32(DType::kF16, w.data(), static_cast<int64_t>(elems), f.data());
    TANDEM_ASSIGN_OR_RETURN(d.data, DeviceBuffer::Allocate(elems * 4));
    TANDEM_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(d.data.data(), f.data(), elems * 4, cudaMemcpyHostToDevice));
  } else if (w.storage() == ops::WeightStorage::kBF16Packed || w.packed_quant()) {
    // The CPU kernels' layouts (bf16 for oneDNN, Q8_0/Q4_0/Q4_1 for the
    // int8 kernel): the engine packs only the host device's weights
    // (ops::WeightLayout::kCpuPacked).
    return absl::FailedPreconditionError(absl::StrCat(
        name(), ": a [", w.rows(), ", ", w.cols(), "] ",
        w.packed_quant() ? std::string(DTypeName(w.block_type())) : std::string("bf16"),
        " weight packed for the CPU; load weights for this device with "
        "ops::WeightLayout::kForDevice"));
  } else {
    // GGUF blocks: dequantized row by row, rounded to bf16.
    d.type = ActType::kBF16;
    const DType t = StorageDType(w.storage());
    const int64_t row_bytes = d.k / DTypeBlockElems(t) * DTypeBlockBytes(t);
    std::vector<float> row(static_cast<size_t>(d.k));
    std::vector<uint16_t> bf(elems);
    for (int64_t r = 0; r < d.n; ++r) {
      ConvertToF32(t, static_cast<const uint8_t*>(w.data()) + r * row_bytes, d.k, row.data());
      for (int64_t i = 0; i < d.k; ++i) bf[static_cast<size_t>(r * d.k + i)] = F32ToBf16(row[i]);
    }
    TANDEM_ASSIGN_OR_RETURN(d.data, DeviceBuffer::Allocate(elems * 2));
    TANDEM_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(d.data.data(), bf.data(), elems * 2, cudaMemcpyHostToDevice));
  }
  weight_bytes_ += static_cast<int64_t>(d.data.size());
  linear_.emplace(&w, std::move(d));
  return absl::OkStatus();
}

absl::Status CudaDevice::Prepare(const ModelWeights& w, const std::vector<float>& inv_freq,
                                 const std::vector<const ops::LinearWeight*>& streamed) {
  if (prepared_) return absl::FailedPreconditionError(absl::StrCat(name(), ": Prepare called twice"));
  prepared_ = true;
  TANDEM_RETURN_IF_ERROR(Use());
  // The embedding table: f32 and bf16 as they are, other dtypes as f32.
  const TensorView& t = w.token_embd;
  if (t.rank() != 2) return absl::InvalidArgumentError("token embeddings must be [vocab, hidden]");
  if (!tables_.contains(t.data)) {
    DeviceTable table;
    if (t.dtype == DType::kF32 || t.dtype == DType::kBF16) {
      table.type = t.dtype == DType::kF32 ? ActType::kF32 : ActType::kBF16;
      TANDEM_ASSIGN_OR_RETURN(table.data, DeviceBuffer::Allocate(static_cast<size_t>(t.nbytes)));
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(table.data.data(), t.data,
                                             static_cast<size_t>(t.nbytes),
                                             cudaMemcpyHostToDevice));
    } else {
      table.type = ActType::kF32;
      std::vector<float> f(static_cast<size_t>(t.numel()));
      const int64_t hidden = t.dim(1);
      const int64_t row_bytes = hidden / DTypeBlockElems(t.dtype) * DTypeBlockBytes(t.dtype);
      for (int64_t r = 0; r < t.dim(0); ++r) {
        ConvertToF32(t.dtype, t.as<uint8_t>() + r * row_bytes, hidden, f.data() + r * hidden);
      }
      TANDEM_ASSIGN_OR_RETURN(table.data, DeviceBuffer::Allocate(f.size() * sizeof(float)));
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(table.data.data(), f.data(),
                                             f.size() * sizeof(float), cudaMemcpyHostToDevice));
    }
    weight_bytes_ += static_cast<int64_t>(table.data.size());
    tables_.emplace(t.data, std::move(table));
  }
  // Marked as present without a copy: Find computes them from wherever
  // they are staged.
  absl::flat_hash_set<const ops::LinearWeight*> skip(streamed.begin(), streamed.end());
  auto mlp = [&](const ops::MlpWeights& m) -> absl::Status {
    if (skip.contains(&m.gate)) return absl::OkStatus();
    TANDEM_RETURN_IF_ERROR(AddLinear(m.gate));
    TANDEM_RETURN_IF_ERROR(AddLinear(m.up));
    return AddLinear(m.down);
  };
  TANDEM_RETURN_IF_ERROR(AddParam(w.output_norm));
  TANDEM_RETURN_IF_ERROR(AddLinear(w.lm_head));
  for (const LayerWeights& l : w.layers) {
    for (const std::vector<float>* v : {&l.attn_norm, &l.q_bias, &l.k_bias, &l.v_bias, &l.q_norm,
                                        &l.k_norm, &l.o_bias, &l.ffn_norm, &l.shared_gate}) {
      TANDEM_RETURN_IF_ERROR(AddParam(*v));
    }
    for (const ops::LinearWeight* x : {&l.q, &l.k, &l.v, &l.o}) {
      TANDEM_RETURN_IF_ERROR(AddLinear(*x));
    }
    if (!l.moe) {
      TANDEM_RETURN_IF_ERROR(mlp(l.mlp));
      continue;
    }
    TANDEM_RETURN_IF_ERROR(AddLinear(l.router));
    for (const ops::MlpWeights& e : l.experts) TANDEM_RETURN_IF_ERROR(mlp(e));
    if (l.has_shared_expert) TANDEM_RETURN_IF_ERROR(mlp(l.shared));
  }
  PinStreamed(streamed);
  half_ = static_cast<int64_t>(inv_freq.size());
  TANDEM_ASSIGN_OR_RETURN(inv_freq_,
                          DeviceBuffer::Allocate(std::max<size_t>(inv_freq.size(), 1) * 4));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq_.data(), inv_freq.data(),
                                         inv_freq.size() * sizeof(float),
                                         cudaMemcpyHostToDevice));
  // The uploads above are cudaMemcpy calls on the legacy default stream,
  // which from pageable memory may return once the bytes are staged,
  // before the DMA lands; the ops run on stream_, a non-blocking stream
  // that does not wait for the legacy one. Wait here, so that no kernel
  // can read a weight (or inv_freq_, the last copy) before it is there.
  TANDEM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

void CudaDevice::PinStreamed(const std::vector<const ops::LinearWeight*>& streamed) {
  std::vector<HostRange> spans;
  spans.reserve(streamed.size());
  for (const ops::LinearWeight* w : streamed) {
    spans.push_back({reinterpret_cast<uintptr_t>(w->data()), static_cast<size_t>(w->nbytes())});
  }
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (const HostRange& r : PageAlignedRanges(std::move(spans), page)) {
    void* p = reinterpret_cast<void*>(r.begin);
    // Weights mapped read-only (a checkpoint file, the weight store as a
    // reader maps it) take the read-only flag; try writable memory first.
    absl::StatusOr<HostRegistration> reg =
        HostRegistration::Register(p, r.bytes, cudaHostRegisterDefault);
    if (!reg.ok()) {
      cudaGetLastError();  // not sticky: clear it before the next call
      reg = HostRegistration::Register(p, r.bytes, cudaHostRegisterReadOnly);
    }
    if (!reg.ok()) {
      cudaGetLastError();
      if (pin_failure_.empty()) {
        pin_failure_ = absl::StrCat("pinning ", r.bytes, " bytes of streamed weights at ", r.begin,
                                    ": ", reg.status().message());
      }
      continue;
    }
    pinned_.push_back(*std::move(reg));
    pinned_bytes_ += static_cast<int64_t>(r.bytes);
  }
}

absl::StatusOr<const float*> CudaDevice::Param(const float* host) const {
  auto it = params_.find(host);
  if (it == params_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": a vector of weights that Prepare did not copy"));
  }
  return it->second.as<const float>();
}

absl::StatusOr<CudaDevice::LinearView> CudaDevice::Find(const ops::LinearWeight& w) const {
  auto it = linear_.find(&w);
  if (it != linear_.end()) {
    const DeviceLinear& d = it->second;
    return LinearView{d.data.data(), d.type, d.n, d.k};
  }
  cudaPointerAttributes attr{};
  const bool on_device = cudaPointerGetAttributes(&attr, w.data()) == cudaSuccess &&
                         attr.type == cudaMemoryTypeDevice && attr.device == ordinal_;
  cudaGetLastError();  // a host pointer may leave an error behind on old runtimes
  if (!on_device) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": a [", w.rows(), ", ", w.cols(), "] weight that Prepare did not copy"));
  }
  if (w.storage() != ops::WeightStorage::kF32 && w.storage() != ops::WeightStorage::kBF16) {
    // The engine stages only row-major f32 and bf16 weights for this device:
    // it refuses to stream GGUF blocks to it (Engine::StartStreaming, the
    // expert cache), and loads f16 as f32 and bf16 unpacked for it
    // (ops::WeightLayout::kForDevice). Other bytes here would be misread.
    return absl::FailedPreconditionError(absl::StrCat(
        name(), ": a staged [", w.rows(), ", ", w.cols(),
        "] weight neither f32 nor row-major bf16; load weights for this device with "
        "ops::WeightLayout::kForDevice and stream only f32 or bf16"));
  }
  return LinearView{w.data(),
                    w.storage() == ops::WeightStorage::kF32 ? ActType::kF32 : ActType::kBF16,
                    w.rows(), w.cols()};
}

absl::Status CudaDevice::Embedding(const TensorView& table, const int32_t* ids, int64_t n,
                                   float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  auto it = tables_.find(table.data);
  if (it == tables_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": an embedding table that Prepare did not copy"));
  }
  TANDEM_ASSIGN_OR_RETURN(void* d_ids, Upload(kSlot0, ids, static_cast<size_t>(n) * 4));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchEmbedding(it->second.data.data(), it->second.type,
                                                table.dim(0), table.dim(1),
                                                static_cast<const int32_t*>(d_ids), n, out,
                                                ActType::kF32, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::RmsNorm(const float* x, int64_t rows, int64_t dim, const float* w,
                                 float eps, float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_ASSIGN_OR_RETURN(const float* dw, Param(w));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchRmsNorm(x, rows, dim, dw, eps, out, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::RowSumSquares(const float* x, int64_t rows, int64_t dim, float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchRowSumSquares(x, rows, dim, out, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ScaleRms(float* x, int64_t rows, int64_t dim, const float* sumsq,
                                  int64_t full_dim, float eps, const float* w) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_ASSIGN_OR_RETURN(const float* dw, Param(w));
  TANDEM_LAUNCH_RETURN_IF_ERROR(
      LaunchScaleRms(x, rows, dim, sumsq, full_dim, eps, dw, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::AddScaled(const float* x, float scale, int64_t n, float* y) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchAddScaled(x, scale, n, y, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::AddBias(const float* bias, int64_t rows, int64_t width, float* y) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_ASSIGN_OR_RETURN(const float* db, Param(bias));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchAddBias(db, rows, width, y, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Zero(float* x, int64_t n) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(x, 0, static_cast<size_t>(n) * sizeof(float), stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Linear(const float* x, int64_t rows, const ops::LinearWeight& w,
                                const float* bias, float* y) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_ASSIGN_OR_RETURN(const LinearView d, Find(w));
  if (rows == 0) return absl::OkStatus();
  const void* in = x;
  if (d.type == ActType::kBF16) {
    TANDEM_RETURN_IF_ERROR(Reserve(x_bf16_, static_cast<size_t>(rows * d.k) * 2));
    TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchConvert(x, ActType::kF32, x_bf16_.data(), ActType::kBF16,
                                                rows * d.k, stream_.get()));
    in = x_bf16_.data();
  }
  TANDEM_RETURN_IF_ERROR(Gemm(blas_, in, d.data, d.type, rows, d.n, d.k, y));
  if (bias != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(const float* db, Param(bias));
    TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchAddBias(db, rows, d.n, y, stream_.get()));
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::Mlp(const ops::MlpWeights& w, const float* x, int64_t rows,
                             float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  const int64_t ffn = w.gate.rows();
  const size_t bytes = static_cast<size_t>(rows * ffn) * sizeof(float);
  TANDEM_RETURN_IF_ERROR(Reserve(gate_, bytes));
  TANDEM_RETURN_IF_ERROR(Reserve(up_, bytes));
  float* g = gate_.as<float>();
  float* u = up_.as<float>();
  TANDEM_RETURN_IF_ERROR(Linear(x, rows, w.gate, nullptr, g));
  TANDEM_RETURN_IF_ERROR(Linear(x, rows, w.up, nullptr, u));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchSwiGlu(g, u, rows * ffn, g, ActType::kF32, stream_.get()));
  return Linear(g, rows, w.down, nullptr, out);
}

absl::Status CudaDevice::Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                              const int64_t* positions, RopeStyle style) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_ASSIGN_OR_RETURN(void* d_pos, Upload(kSlot0, positions, static_cast<size_t>(tokens) * 8));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchRope(x, ActType::kF32, tokens, heads, head_dim,
                                           static_cast<const int64_t*>(d_pos),
                                           inv_freq_.as<const float>(), half_,
                                           style == RopeStyle::kInterleaved, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Attend(const ops::PagedKvLayer& kv, const float* q, const float* k,
                                const float* v, int64_t heads, float scale,
                                const std::vector<AttentionChunk>& chunks, float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  if (chunks.empty()) return absl::OkStatus();
  const int64_t bs = kv.block_size;
  // Slots of every row the chunks cover (vLLM's slot mapping); rows of no
  // chunk are skipped.
  int64_t rows = 0, max_blocks = 0, max_q = 0;
  bool decode_only = true;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const AttentionChunk& c = chunks[i];
    rows = std::max(rows, c.row + c.n);
    max_blocks = std::max(max_blocks, static_cast<int64_t>(c.block_table->size()));
    max_q = std::max(max_q, c.n);
    decode_only = decode_only && c.n == 1 && c.row == static_cast<int64_t>(i);
  }
  std::vector<int64_t> slots(static_cast<size_t>(rows), -1);
  std::vector<int32_t> tables(static_cast<size_t>(chunks.size() * max_blocks), 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const AttentionChunk& c = chunks[i];
    const std::vector<int32_t>& t = *c.block_table;
    if ((c.start_pos + c.n + bs - 1) / bs > static_cast<int64_t>(t.size())) {
      return absl::InvalidArgumentError("Attend: a block table does not cover its chunk");
    }
    for (int64_t j = 0; j < c.n; ++j) {
      const int64_t pos = c.start_pos + j;
      slots[static_cast<size_t>(c.row + j)] = t[static_cast<size_t>(pos / bs)] * bs + pos % bs;
    }
    std::copy(t.begin(), t.end(), tables.begin() + static_cast<int64_t>(i) * max_blocks);
  }
  TANDEM_ASSIGN_OR_RETURN(void* d_slots, Upload(kSlot0, slots.data(), slots.size() * 8));
  TANDEM_ASSIGN_OR_RETURN(void* d_tables, Upload(kSlot1, tables.data(), tables.size() * 4));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchWriteKv(k, v, rows, kv.kv_heads, kv.head_dim,
                                              static_cast<const int64_t*>(d_slots), kv.k, kv.v,
                                              ActType::kF32, stream_.get()));
  const int64_t n = static_cast<int64_t>(chunks.size());
  if (decode_only) {
    std::vector<int32_t> lens(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
      lens[i] = static_cast<int32_t>(chunks[i].start_pos + 1);
    }
    TANDEM_ASSIGN_OR_RETURN(void* d_lens, Upload(kSlot2, lens.data(), lens.size() * 4));
    TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchPagedDecodeAttention(
        q, kv.k, kv.v, ActType::kF32, bs, kv.kv_heads, kv.head_dim, heads,
        static_cast<const int32_t*>(d_tables), max_blocks, static_cast<const int32_t*>(d_lens), n,
        scale, out, stream_.get()));
    return absl::OkStatus();
  }
  std::vector<int32_t> q_start(chunks.size()), q_len(chunks.size()), start(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    q_start[i] = static_cast<int32_t>(chunks[i].row);
    q_len[i] = static_cast<int32_t>(chunks[i].n);
    start[i] = static_cast<int32_t>(chunks[i].start_pos);
  }
  TANDEM_ASSIGN_OR_RETURN(void* d_qs, Upload(kSlot2, q_start.data(), q_start.size() * 4));
  TANDEM_ASSIGN_OR_RETURN(void* d_ql, Upload(kSlot3, q_len.data(), q_len.size() * 4));
  TANDEM_ASSIGN_OR_RETURN(void* d_sp, Upload(kSlot4, start.data(), start.size() * 4));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchPrefillAttention(
      q, kv.k, kv.v, ActType::kF32, bs, kv.kv_heads, kv.head_dim, heads,
      static_cast<const int32_t*>(d_tables), max_blocks, static_cast<const int32_t*>(d_qs),
      static_cast<const int32_t*>(d_ql), static_cast<const int32_t*>(d_sp), n, max_q, scale, out,
      stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::RouteTopK(const float* logits, int64_t n, int64_t experts, int64_t k,
                                   bool renormalize, int32_t* ids, float* weights) {
  TANDEM_RETURN_IF_ERROR(Use());
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(n * k, 1)) * 4;
  TANDEM_RETURN_IF_ERROR(Reserve(route_ids_, bytes));
  TANDEM_RETURN_IF_ERROR(Reserve(route_w_, bytes));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchRouteTopK(logits, n, experts, k, renormalize,
                                                route_ids_.as<int32_t>(), route_w_.as<float>(),
                                                stream_.get()));
  const size_t out = static_cast<size_t>(n * k) * 4;
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(ids, route_ids_.data(), out, cudaMemcpyDeviceToHost, stream_.get()));
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(weights, route_w_.data(), out, cudaMemcpyDeviceToHost, stream_.get()));
  TANDEM_RETURN_IF_ERROR(stream_.Synchronize());
  // The callers index per-expert lists with these ids: one out of range
  // would be a write out of bounds, so it is an error here instead.
  for (int64_t i = 0; i < n * k; ++i) {
    if (ids[i] < 0 || ids[i] >= experts) {
      return absl::InternalError(absl::StrCat("RouteTopK: expert id ", ids[i], " of token ",
                                              i / k, " is outside [0, ", experts, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::GreedyPick(const float* logits, int64_t rows, int64_t vocab,
                                    int32_t* ids, float* logprobs) {
  TANDEM_RETURN_IF_ERROR(Use());
  if (rows == 0) return absl::OkStatus();
  // Ids and log-probs side by side in one buffer, so the step waits for
  // one copy back, not two.
  const size_t bytes = static_cast<size_t>(rows) * 4;
  TANDEM_RETURN_IF_ERROR(Reserve(pick_, 2 * bytes));
  int32_t* d_ids = pick_.as<int32_t>();
  float* d_logprobs = reinterpret_cast<float*>(d_ids + rows);
  TANDEM_LAUNCH_RETURN_IF_ERROR(
      LaunchGreedyPick(logits, rows, vocab, d_ids, d_logprobs, stream_.get()));
  pick_host_.resize(2 * static_cast<size_t>(rows));
  TANDEM_RETURN_IF_ERROR(CopyToHost(pick_.data(), 2 * bytes, pick_host_.data()));
  std::memcpy(ids, pick_host_.data(), bytes);
  std::memcpy(logprobs, pick_host_.data() + rows, bytes);
  return absl::OkStatus();
}

absl::Status CudaDevice::GatherRows(const float* x, int64_t width, const int64_t* rows,
                                    int64_t n, float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  std::vector<int32_t> r(rows, rows + n);
  TANDEM_ASSIGN_OR_RETURN(void* d_rows, Upload(kSlot0, r.data(), r.size() * 4));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchGatherRows(x, width, static_cast<const int32_t*>(d_rows), n,
                                                 out, ActType::kF32, stream_.get()));
  return absl::OkStatus();
}

absl::Status CudaDevice::ScatterAddRows(const float* x, int64_t width, const int64_t* rows,
                                        const float* scales, int64_t n, float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  std::vector<int32_t> r(rows, rows + n);
  TANDEM_ASSIGN_OR_RETURN(void* d_rows, Upload(kSlot0, r.data(), r.size() * 4));
  TANDEM_ASSIGN_OR_RETURN(void* d_scales, Upload(kSlot1, scales, static_cast<size_t>(n) * 4));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchScatterAddRows(x, width, static_cast<const int32_t*>(d_rows),
                                                     static_cast<const float*>(d_scales), n, out,
                                                     stream_.get()));
  return absl::OkStatus();
}

// All the runs' rows gathered into one grouped matrix, then one grouped
// GEMM per projection (gate, up, down) over every expert and one SwiGLU,
// instead of five launches per expert; the weighted additions go back run
// by run, so a token's experts add up in the runs' order as on the host.
// Runs whose weights differ in shape or type (never a layer's own experts)
// take Mlp one by one.
absl::Status CudaDevice::RunExperts(const float* x, int64_t width,
                                    const std::vector<ExpertRun>& runs, float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  std::vector<const void*> gate, up, down;
  std::vector<int32_t> offsets = {0}, token_of;
  LinearView g0;
  bool alike = true;
  for (const ExpertRun& r : runs) {
    if (r.n == 0) continue;
    TANDEM_ASSIGN_OR_RETURN(const LinearView g, Find(r.weights->gate));
    TANDEM_ASSIGN_OR_RETURN(const LinearView u, Find(r.weights->up));
    TANDEM_ASSIGN_OR_RETURN(const LinearView d, Find(r.weights->down));
    if (gate.empty()) g0 = g;
    alike = alike && g.type == g0.type && u.type == g0.type && d.type == g0.type &&
            g.n == g0.n && g.k == width && u.n == g0.n && u.k == width && d.n == width &&
            d.k == g0.n;
    gate.push_back(g.data);
    up.push_back(u.data);
    down.push_back(d.data);
    for (int64_t i = 0; i < r.n; ++i) token_of.push_back(static_cast<int32_t>(r.rows[i]));
    offsets.push_back(static_cast<int32_t>(token_of.size()));
  }
  const int64_t total = static_cast<int64_t>(token_of.size());
  if (total == 0) return absl::OkStatus();
  const size_t wide = static_cast<size_t>(total * width) * sizeof(float);
  TANDEM_RETURN_IF_ERROR(Reserve(expert_in_, wide));
  TANDEM_RETURN_IF_ERROR(Reserve(expert_out_, wide));
  float* xin = expert_in_.as<float>();
  float* yout = expert_out_.as<float>();
  if (gate.size() == 1 || !alike) {
    int64_t at = 0;
    for (const ExpertRun& r : runs) {
      if (r.n == 0) continue;
      TANDEM_RETURN_IF_ERROR(GatherRows(x, width, r.rows, r.n, xin + at * width));
      TANDEM_RETURN_IF_ERROR(Mlp(*r.weights, xin + at * width, r.n, yout + at * width));
      at += r.n;
    }
  } else {
    const int64_t ffn = g0.n;
    TANDEM_ASSIGN_OR_RETURN(void* d_tokens, Upload(kSlot2, token_of.data(), token_of.size() * 4));
    TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchGatherRows(x, width, static_cast<const int32_t*>(d_tokens),
                                                   total, xin, ActType::kF32, stream_.get()));
    const void* in = xin;
    if (g0.type == ActType::kBF16) {
      TANDEM_RETURN_IF_ERROR(
          Reserve(x_bf16_, static_cast<size_t>(total * std::max(width, ffn)) * 2));
      TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchConvert(xin, ActType::kF32, x_bf16_.data(),
                                                  ActType::kBF16, total * width, stream_.get()));
      in = x_bf16_.data();
    }
    const size_t act = static_cast<size_t>(total * ffn) * sizeof(float);
    TANDEM_RETURN_IF_ERROR(Reserve(gate_, act));
    TANDEM_RETURN_IF_ERROR(Reserve(up_, act));
    // Three pointer arrays per GEMM; each GEMM has its own, as the next
    // GEMM's arrays are copied while the previous one may still run.
    const size_t per_gemm = 3 * gate.size();
    TANDEM_RETURN_IF_ERROR(Reserve(group_ptrs_, 3 * per_gemm * sizeof(void*)));
    void** ptrs = group_ptrs_.as<void*>();
    float* g = gate_.as<float>();
    float* u = up_.as<float>();
    TANDEM_RETURN_IF_ERROR(GroupedGemm(blas_, in, gate, g0.type, offsets, ffn, width, g, ptrs));
    TANDEM_RETURN_IF_ERROR(
        GroupedGemm(blas_, in, up, g0.type, offsets, ffn, width, u, ptrs + per_gemm));
    TANDEM_LAUNCH_RETURN_IF_ERROR(
        LaunchSwiGlu(g, u, total * ffn, g, ActType::kF32, stream_.get()));
    const void* mid = g;
    if (g0.type == ActType::kBF16) {
      // The up GEMM queued before has read x_bf16_ by the time this runs.
      TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchConvert(g, ActType::kF32, x_bf16_.data(),
                                                  ActType::kBF16, total * ffn, stream_.get()));
      mid = x_bf16_.data();
    }
    TANDEM_RETURN_IF_ERROR(GroupedGemm(blas_, mid, down, g0.type, offsets, width, ffn, yout,
                                       ptrs + 2 * per_gemm));
  }
  int64_t at = 0;
  for (const ExpertRun& r : runs) {
    if (r.n == 0) continue;
    TANDEM_RETURN_IF_ERROR(ScatterAddRows(yout + at * width, width, r.rows, r.scales, r.n, out));
    at += r.n;
  }
  return absl::OkStatus();
}

absl::Status CudaDevice::SigmoidGateAdd(const float* x, const float* h, const float* gate,
                                        int64_t rows, int64_t width, float* out) {
  TANDEM_RETURN_IF_ERROR(Use());
  TANDEM_ASSIGN_OR_RETURN(const float* dg, Param(gate));
  TANDEM_LAUNCH_RETURN_IF_ERROR(LaunchSigmoidGateAdd(x, h, dg, rows, width, out, stream_.get()));
  return absl::OkStatus();
}

}  // namespace tandem::cuda
