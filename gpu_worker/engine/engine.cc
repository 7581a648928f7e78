#include "gpu_worker/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/host_memory.h"
#include "common/status_macros.h"
#include "gpu_worker/engine/local_expert_offload.h"
#include "gpu_worker/host/host_device.h"
#include "cpu_worker/ops/attention.h"
#include "cpu_worker/ops/elementwise.h"
#include "cpu_worker/ops/rope.h"
#include "cpu_worker/ops/router.h"

namespace tandem {
namespace {

// The FFN matrices of a layer, in the order they are streamed.
std::vector<const ops::LinearWeight*> FfnMatrices(const LayerWeights& l);

absl::Status MicroBatchesWithCacheError() {
  return absl::FailedPreconditionError(
      "micro-batches do not combine with the expert cache: its per-layer plan covers all of a "
      "step's tokens at once");
}

void GrowHost(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

}  // namespace

absl::Status Engine::Grow(Scratch& s, int64_t n) {
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
  if (s.mem != nullptr && s.mem->size() >= bytes) return absl::OkStatus();
  s.mem.reset();
  TANDEM_ASSIGN_OR_RETURN(s.mem, dev_->Allocate(bytes));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Checkpoint> ckpt,
                                                       const EngineOptions& options) {
  if (ckpt == nullptr) return absl::InvalidArgumentError("Engine::Create: no checkpoint");
  const ModelConfig& c = ckpt->config();
  TANDEM_RETURN_IF_ERROR(c.Validate());
  if (options.max_sequences <= 0 || options.block_size <= 0 || options.max_context < 0) {
    return absl::InvalidArgumentError("engine options: sizes must be positive");
  }
  auto e = std::unique_ptr<Engine>(new Engine());
  if (options.device != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(e->own_device_, options.device());
    if (e->own_device_ == nullptr) return absl::InvalidArgumentError("the device factory made none");
  } else {
    e->own_device_ = std::make_unique<HostDevice>();
  }
  e->dev_ = e->own_device_.get();
  TensorParallel tp;
  if (options.tensor_parallel != nullptr) {
    tp = {options.tensor_parallel->rank(), options.tensor_parallel->size()};
    if (tp.size > 1) e->tp_ = options.tensor_parallel;
  }
  TANDEM_RETURN_IF_ERROR(CheckTensorParallel(c, tp));
  const AttentionShard shard = ShardAttention(c, tp);
  e->heads_ = shard.heads;
  e->kv_heads_ = shard.kv_heads;
  for (size_t l = 0; l < options.remote_experts.size(); ++l) {
    for (int32_t x : options.remote_experts[l]) {
      if (static_cast<int64_t>(l) >= c.num_layers || !c.IsMoeLayer(static_cast<int64_t>(l)) ||
          x < 0 || x >= c.num_experts) {
        return absl::InvalidArgumentError(absl::StrCat("engine options: remote expert ", x,
                                                       " of layer ", l, " is not in the model"));
      }
      e->experts_skipped_ = true;
    }
  }
  // The device says who reads the weights' bytes: the host device's CPU
  // kernels only (bf16 and Q8_0 packed for them where that is faster, and
  // where the copies fit), or the CUDA device, which copies the row-major bytes and
  // computes f32 and bf16 weights only (f16 checkpoints widened to f32 at
  // load for it).
  ops::WeightLayout layout = e->dev_->weight_layout();
  if (layout == ops::WeightLayout::kCpuPacked) {
    TANDEM_ASSIGN_OR_RETURN(const int64_t packed, PackedWeightBytes(*ckpt, options.compute));
    const int64_t available = options.available_memory_bytes >= 0
                                  ? options.available_memory_bytes
                                  : AvailableMemoryBytes();
    if (packed > 0 && available >= 0 && packed > available / 10 * 9) {
      layout = ops::WeightLayout::kInPlace;
      e->load_notice_ = absl::StrFormat(
          "weights stay where the model file maps them: packing them for the CPU's kernels "
          "would copy %.2f GB, and %.2f GB of memory is available (decode of several "
          "sequences runs up to 1.6x slower unpacked)",
          static_cast<double>(packed) / 1e9, static_cast<double>(available) / 1e9);
    }
  }
  TANDEM_ASSIGN_OR_RETURN(
      e->weights_, ModelWeights::Load(*ckpt, options.compute, tp, options.remote_experts,
                                      options.cpu_ffn_rows, layout));
  // GGUF k-quants and the like: converted now or mapped from the cache.
  if (const std::string note = ckpt->LoadNote(); !note.empty()) {
    e->load_notice_ = e->load_notice_.empty() ? note : absl::StrCat(e->load_notice_, "; ", note);
  }
  TANDEM_RETURN_IF_ERROR(e->SetPrefillGpuTokens(options.prefill_gpu_tokens));
  e->max_context_ = options.max_context > 0 ? options.max_context
                                            : std::min<int64_t>(c.max_position, 8192);
  // Sliding-window attention equals full attention while a sequence fits in
  // the window; the engine attends fully, so it stops at the window.
  if (c.sliding_window > 0) e->max_context_ = std::min(e->max_context_, c.sliding_window);
  const int64_t blocks_per_seq = (e->max_context_ + options.block_size - 1) / options.block_size;
  TANDEM_ASSIGN_OR_RETURN(
      e->kv_, KvCache::Create(c.num_layers, e->kv_heads_, c.head_dim,
                              blocks_per_seq * options.max_sequences, options.block_size,
                              e->dev_));
  e->inv_freq_ = ops::RopeInvFreq(c.head_dim, c.rope_theta, c.rope_scaling);
  // Llama-3.x GGUF files carry their RoPE frequency scaling as per-dimension
  // divisors of the frequency (llama.cpp's rope_freqs) instead of metadata.
  if (ckpt->HasTensor("rope_freqs.weight")) {
    TANDEM_ASSIGN_OR_RETURN(TensorView f, ckpt->Tensor("rope_freqs.weight"));
    if (f.numel() != static_cast<int64_t>(e->inv_freq_.size()) || f.dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          ckpt->path(), ": rope_freqs.weight must hold ", e->inv_freq_.size(), " f32 values"));
    }
    for (size_t i = 0; i < e->inv_freq_.size(); ++i) e->inv_freq_[i] /= f.as<float>()[i];
  }
  e->ckpt_ = std::move(ckpt);
  TANDEM_RETURN_IF_ERROR(e->SetUpStreaming(options));
  std::vector<const ops::LinearWeight*> streamed;
  for (size_t l = 0; e->pager_ != nullptr && l < e->weights_.layers.size(); ++l) {
    if (!e->pager_->IsStreamed(static_cast<int64_t>(l))) continue;
    for (const ops::LinearWeight* w : FfnMatrices(e->weights_.layers[l])) streamed.push_back(w);
  }
  // The CPU's MLP rows stay in host memory.
  for (const LayerWeights& l : e->weights_.layers) {
    if (l.mlp_cpu.gate.rows() == 0) continue;
    for (const ops::LinearWeight* w : {&l.mlp_cpu.gate, &l.mlp_cpu.up, &l.mlp_cpu.down}) {
      streamed.push_back(w);
    }
  }
  if (options.expert_cache.capacity_per_layer > 0) {
    TANDEM_RETURN_IF_ERROR(e->SetUpExpertCache(options));
    // The routed experts stay in host memory: the cache copies them in.
    for (const LayerWeights& l : e->weights_.layers) {
      for (const ops::MlpWeights& x : l.experts) {
        for (const ops::LinearWeight* w : {&x.gate, &x.up, &x.down}) streamed.push_back(w);
      }
    }
  }
  TANDEM_RETURN_IF_ERROR(e->SetMicroBatchSize(options.micro_batch_size));
  TANDEM_RETURN_IF_ERROR(e->dev_->Prepare(e->weights_, e->inv_freq_, streamed));
  return e;
}

namespace {

std::vector<const ops::LinearWeight*> FfnMatrices(const LayerWeights& l) {
  std::vector<const ops::LinearWeight*> m;
  auto add = [&](const ops::MlpWeights& w) {
    m.push_back(&w.gate);
    m.push_back(&w.up);
    m.push_back(&w.down);
  };
  if (!l.moe) {
    add(l.mlp);
    return m;
  }
  for (const ops::MlpWeights& e : l.experts) add(e);
  if (l.has_shared_expert) add(l.shared);
  return m;
}

int64_t FfnBytes(const LayerWeights& l) {
  int64_t n = 0;
  for (const ops::LinearWeight* w : FfnMatrices(l)) n += (w->nbytes() + 63) / 64 * 64;
  return n;
}

// `lw` with its FFN matrices read from the staged copies at `at`.
LayerWeights StagedFfn(const LayerWeights& lw, const std::vector<const void*>& at) {
  LayerWeights s;
  s.moe = lw.moe;
  s.has_shared_expert = lw.has_shared_expert;
  s.router = lw.router;
  s.shared_gate = lw.shared_gate;
  size_t i = 0;
  auto stage = [&](const ops::MlpWeights& w) {
    ops::MlpWeights o;
    o.gate = w.gate.WithData(at[i++]);
    o.up = w.up.WithData(at[i++]);
    o.down = w.down.WithData(at[i++]);
    return o;
  };
  if (!lw.moe) {
    s.mlp = stage(lw.mlp);
    s.mlp_cpu = lw.mlp_cpu;  // never staged: the CPU reads it where it is
    return s;
  }
  s.experts.reserve(lw.experts.size());
  for (const ops::MlpWeights& e : lw.experts) s.experts.push_back(stage(e));
  if (lw.has_shared_expert) s.shared = stage(lw.shared);
  return s;
}

}  // namespace

absl::Status Engine::SetUpStreaming(const EngineOptions& options) {
  if (options.weight_budget_bytes < 0 || options.stream_page_bytes <= 0) {
    return absl::InvalidArgumentError(
        "engine options: weight_budget_bytes must be >= 0 and stream_page_bytes > 0");
  }
  std::vector<int64_t> streamed;
  int64_t largest = 0;
  if (!options.streamed_ffn_layers.empty()) {
    absl::flat_hash_set<int64_t> seen;
    for (int64_t l : options.streamed_ffn_layers) {
      if (l < 0 || l >= static_cast<int64_t>(weights_.layers.size()) || !seen.insert(l).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "engine options: streamed layer ", l, " is out of range or listed twice"));
      }
      largest = std::max(largest, FfnBytes(weights_.layers[static_cast<size_t>(l)]));
    }
    streamed = options.streamed_ffn_layers;
    std::sort(streamed.begin(), streamed.end());
    return StartStreaming(streamed, largest, options.stream_page_bytes);
  }
  if (options.weight_budget_bytes == 0) return absl::OkStatus();
  int64_t total = weights_.lm_head.nbytes();
  for (const LayerWeights& l : weights_.layers) {
    for (const ops::LinearWeight* w : {&l.q, &l.k, &l.v, &l.o, &l.router}) total += w->nbytes();
    total += FfnBytes(l);
  }
  // Stream the last layers' FFNs until the resident weights and the two
  // staging buffers fit.
  int64_t resident = total;
  for (int64_t l = static_cast<int64_t>(weights_.layers.size()) - 1;
       l >= 0 && resident + 2 * largest > options.weight_budget_bytes; --l) {
    const int64_t b = FfnBytes(weights_.layers[static_cast<size_t>(l)]);
    resident -= b;
    largest = std::max(largest, b);
    streamed.insert(streamed.begin(), l);
  }
  if (resident + 2 * largest > options.weight_budget_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a weight budget of ", options.weight_budget_bytes, " bytes holds not even the ",
        resident, " bytes of attention weights and LM head plus two staging buffers of ",
        largest, " bytes"));
  }
  if (streamed.empty()) return absl::OkStatus();
  return StartStreaming(streamed, largest, options.stream_page_bytes);
}

absl::Status Engine::SetUpExpertCache(const EngineOptions& options) {
  if (experts_skipped_ || tp_ != nullptr || pager_ != nullptr) {
    return absl::InvalidArgumentError(
        "engine options: the expert cache places the routed experts itself; it does not "
        "combine with remote_experts, tensor parallelism or FFN streaming");
  }
  if (copy_engine_ == nullptr) {
    TANDEM_ASSIGN_OR_RETURN(copy_engine_, dev_->NewCopyEngine());
  }
  TANDEM_ASSIGN_OR_RETURN(cache_, ExpertCache::Create(config(), weights_.layers, *dev_,
                                                      *copy_engine_, options.expert_cache));
  // Until SetExpertOffload names another: every expert on this process's
  // CPU, from the host copies in weights_.
  own_offload_ = std::make_unique<LocalExpertOffload>(&weights_,
                                                      [](int64_t, int64_t) { return true; });
  offload_ = own_offload_.get();
  return absl::OkStatus();
}

absl::Status Engine::StartStreaming(const std::vector<int64_t>& streamed, int64_t largest,
                                    int64_t page_bytes) {
  std::vector<StreamedLayer> layers;
  for (int64_t l : streamed) {
    StreamedLayer sl;
    sl.layer = l;
    for (const ops::LinearWeight* w : FfnMatrices(weights_.layers[static_cast<size_t>(l)])) {
      if (!dev_->host_memory() && w->quantized()) {
        return absl::UnimplementedError(absl::StrCat(
            "device ", dev_->name(), " computes streamed weights in place and does not run "
            "GGUF blocks; layer ", l, "'s FFN is quantized (keep it resident with a larger "
            "budget, or use the host device)"));
      }
      sl.matrices.push_back({w->data(), static_cast<size_t>(w->nbytes())});
    }
    layers.push_back(std::move(sl));
  }
  for (DeviceMemory& s : staging_) {
    TANDEM_ASSIGN_OR_RETURN(s, dev_->Allocate(static_cast<size_t>(largest + 3) / 4 * 4));
  }
  TANDEM_ASSIGN_OR_RETURN(copy_engine_, dev_->NewCopyEngine());
  TANDEM_ASSIGN_OR_RETURN(
      pager_, WeightPager::Create(std::move(layers), staging_[0]->data(), staging_[1]->data(),
                                  static_cast<size_t>(largest), static_cast<size_t>(page_bytes),
                                  copy_engine_.get()));
  return absl::OkStatus();
}

absl::Status Engine::Ffn(int64_t l, const LayerWeights& lw, int64_t rows) {
  if (lw.moe) return Moe(l, lw, rows);
  if (lw.mlp_cpu.gate.rows() > 0) return SplitMlp(lw, rows);
  return dev_->Mlp(lw.mlp, FfnIn(), rows, FfnOut());
}

absl::Status Engine::SetMicroBatchSize(int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("micro_batch_size must not be negative");
  if (n > 0 && cache_ != nullptr) {
    return MicroBatchesWithCacheError();
  }
  micro_batch_size_ = n;
  return absl::OkStatus();
}

absl::Status Engine::SetPrefillGpuTokens(int64_t n) {
  if (n < 0) return absl::InvalidArgumentError("prefill_gpu_tokens must not be negative");
  if (n > 0 && std::none_of(weights_.layers.begin(), weights_.layers.end(),
                            [](const LayerWeights& l) { return l.mlp_cpu.gate.rows() > 0; })) {
    return absl::InvalidArgumentError(
        "prefill_gpu_tokens assigns the prefill tokens of the CC rows (cpu_ffn_rows); this "
        "model has none");
  }
  // Those tokens run on a copy of the CC weights on the device, which
  // computes staged bytes in place: f32 or bf16 only.
  if (n > 0 && !dev_->host_memory()) {
    for (size_t l = 0; l < weights_.layers.size(); ++l) {
      const MlpWeights& cc = weights_.layers[l].mlp_cpu;
      if (cc.gate.quantized() || cc.up.quantized() || cc.down.quantized()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prefill_gpu_tokens on device ", dev_->name(), ": layer ", l,
            "'s CC rows are GGUF blocks, which the device does not compute from a copy; load "
            "them as f32 (--dtype auto) or keep prefill_gpu_tokens at 0"));
      }
    }
  }
  prefill_gpu_tokens_ = n;
  return absl::OkStatus();
}

absl::StatusOr<ops::MlpWeights> Engine::StageCcWeights(const LayerWeights& lw) {
  const ops::MlpWeights& cc = lw.mlp_cpu;
  if (dev_->host_memory()) return cc;  // the device reads host memory
  const ops::LinearWeight* parts[3] = {&cc.gate, &cc.up, &cc.down};
  auto aligned = [](const ops::LinearWeight* w) {
    return (static_cast<size_t>(w->nbytes()) + 255) / 256 * 256;
  };
  const size_t total = aligned(parts[0]) + aligned(parts[1]) + aligned(parts[2]);
  if (cg_prime_ == nullptr || cg_prime_->size() < total) {
    cg_prime_.reset();
    TANDEM_ASSIGN_OR_RETURN(cg_prime_, dev_->Allocate(total));
  }
  ops::MlpWeights staged = cc;
  ops::LinearWeight* out[3] = {&staged.gate, &staged.up, &staged.down};
  uint8_t* at = static_cast<uint8_t*>(cg_prime_->data());
  for (int i = 0; i < 3; ++i) {
    TANDEM_RETURN_IF_ERROR(
        dev_->CopyToDevice(parts[i]->data(), static_cast<size_t>(parts[i]->nbytes()), at));
    *out[i] = parts[i]->WithData(at);
    at += aligned(parts[i]);
  }
  return staged;
}

absl::Status Engine::SplitMlp(const LayerWeights& lw, int64_t rows) {
  const int64_t hidden = config().hidden_size;
  const int64_t n = rows * hidden;
  // ScheInfer's prefill token assignment: the step's rows [0, n_g) take the
  // CC part on the device (CG'), the others on the CPU; this micro-batch
  // holds the step's rows [row0_, row0_ + rows).
  const int64_t g = std::clamp<int64_t>(step_gpu_rows_ - row0_, 0, rows);
  float* const in = FfnIn();
  float* const out = FfnOut();
  const int64_t cpu_rows = rows - g;
  GrowHost(cc_out_, n);
  if (g > 0) TANDEM_RETURN_IF_ERROR(Grow(cg_out_, g * hidden));
  if (dev_->host_memory()) {
    // One set of cores: the parts one after the other.
    TANDEM_RETURN_IF_ERROR(dev_->Mlp(lw.mlp, in, rows, out));
    if (g > 0) {
      TANDEM_ASSIGN_OR_RETURN(const ops::MlpWeights cc, StageCcWeights(lw));
      TANDEM_RETURN_IF_ERROR(dev_->Mlp(cc, in, g, cg_out_.data()));
      TANDEM_RETURN_IF_ERROR(dev_->AddScaled(cg_out_.data(), 1.0f, g * hidden, out));
    }
    if (cpu_rows == 0) return absl::OkStatus();
    ops::RunMlp(lw.mlp_cpu, in + g * hidden, cpu_rows, cc_out_.data(), cc_scratch_);
    return dev_->AddScaled(cc_out_.data(), 1.0f, cpu_rows * hidden, out + g * hidden);
  }
  GrowHost(cc_in_, n);
  if (cpu_rows > 0) {
    TANDEM_RETURN_IF_ERROR(dev_->CopyToHost(in + g * hidden,
                                            static_cast<size_t>(cpu_rows * hidden) * sizeof(float),
                                            cc_in_.data()));
  }
  // The CPU's rows on a thread while the device's ops (the CC weights' copy
  // for CG' among them) are queued and run.
  std::thread cpu([&] {
    if (cpu_rows > 0) ops::RunMlp(lw.mlp_cpu, cc_in_.data(), cpu_rows, cc_out_.data(), cc_scratch_);
  });
  absl::Status device = dev_->Mlp(lw.mlp, in, rows, out);
  if (device.ok() && g > 0) {
    absl::StatusOr<ops::MlpWeights> staged = StageCcWeights(lw);
    device = staged.status();
    if (device.ok()) device = dev_->Mlp(*staged, in, g, cg_out_.data());
    if (device.ok()) device = dev_->AddScaled(cg_out_.data(), 1.0f, g * hidden, out);
    // The copy is reused by the next layer: the device must have read it.
    if (device.ok()) device = dev_->Synchronize();
  }
  cpu.join();
  TANDEM_RETURN_IF_ERROR(device);
  if (cpu_rows == 0) return absl::OkStatus();
  TANDEM_RETURN_IF_ERROR(Grow(cc_dev_, cpu_rows * hidden));
  TANDEM_RETURN_IF_ERROR(dev_->CopyToDevice(
      cc_out_.data(), static_cast<size_t>(cpu_rows * hidden) * sizeof(float), cc_dev_.data()));
  return dev_->AddScaled(cc_dev_.data(), 1.0f, cpu_rows * hidden, out + g * hidden);
}

int64_t Engine::SequenceLength(int64_t seq_id) const {
  auto it = seq_len_.find(seq_id);
  return it == seq_len_.end() ? 0 : it->second;
}

void Engine::FreeSequence(int64_t seq_id) {
  if (cpu_seqs_.erase(seq_id) > 0 && attn_offload_ != nullptr) attn_offload_->Free(seq_id);
  kv_->Free(seq_id);
  seq_len_.erase(seq_id);
}

void Engine::Place(const SequenceChunk& s) {
  if (s.cpu_attention == IsCpuAttention(s.seq_id)) return;
  // Only a sequence that holds no tokens yet gets here (Validate): a new
  // one, or one whose first step failed. Drop whatever the other side
  // reserved for it.
  if (s.cpu_attention) {
    kv_->Free(s.seq_id);
    cpu_seqs_.insert(s.seq_id);
  } else {
    cpu_seqs_.erase(s.seq_id);
    if (attn_offload_ != nullptr) attn_offload_->Free(s.seq_id);
  }
}

absl::Status Engine::Validate(const std::vector<SequenceChunk>& batch) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty batch");
  if (experts_skipped_ && offload_ == nullptr) {
    return absl::FailedPreconditionError(
        "some routed experts are not loaded here (remote_experts) and no expert offload is set");
  }
  if (tp_ != nullptr && offload_ != nullptr) {
    return absl::FailedPreconditionError(
        "expert offload does not combine with tensor parallelism yet");
  }
  absl::flat_hash_set<int64_t> seen;
  const int64_t vocab = config().vocab_size;
  for (const SequenceChunk& s : batch) {
    if (!seen.insert(s.seq_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s.seq_id, " appears twice in one step"));
    }
    if (s.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, " has no tokens"));
    }
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", t, " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
    if (s.shared_prefix_tokens != 0) {
      if (s.block_table.empty() || s.cpu_attention || s.shared_prefix_tokens < 0 ||
          s.start_pos != s.shared_prefix_tokens ||
          SequenceLength(s.seq_id) > s.shared_prefix_tokens) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", s.seq_id, " starts from a shared prefix of ", s.shared_prefix_tokens,
            " tokens, which needs a block table, the engine's own cache, start_pos at the "
            "prefix's end (it is ",
            s.start_pos, ") and no more tokens of its own (it holds ", SequenceLength(s.seq_id),
            ")"));
      }
    }
    // A shared prefix counts as held: its KV is in the sequence's blocks.
    const int64_t len = std::max(SequenceLength(s.seq_id), s.shared_prefix_tokens);
    if (s.cpu_attention && tp_ != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "sequence ", s.seq_id, " asks for CPU attention, which does not combine with tensor "
          "parallelism yet"));
    }
    if (s.cpu_attention && attn_offload_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", s.seq_id,
                       " asks for CPU attention but this engine has no attention offload"));
    }
    if (len > 0 && s.cpu_attention != IsCpuAttention(s.seq_id)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", s.seq_id, " holds its KV ", IsCpuAttention(s.seq_id) ? "on the CPU" : "here",
          "; a sequence keeps its attention placement until it is freed"));
    }
    if (s.start_pos < 0 || s.start_pos > len) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, " starts at ",
                                                     s.start_pos, " but holds ", len, " tokens"));
    }
    const int64_t end = s.start_pos + static_cast<int64_t>(s.tokens.size());
    if (end > max_context_) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.seq_id, " would reach ", end,
                                                     " tokens, past the context limit of ",
                                                     max_context_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Engine::Step(const std::vector<SequenceChunk>& batch,
                                        absl::Span<const int64_t> micro_batch_sizes) {
  TANDEM_RETURN_IF_ERROR(Validate(batch));
  int64_t listed = 0;
  for (int64_t n : micro_batch_sizes) {
    if (n <= 0) return absl::InvalidArgumentError("a micro-batch of no sequences");
    listed += n;
  }
  if (!micro_batch_sizes.empty() && listed != static_cast<int64_t>(batch.size())) {
    return absl::InvalidArgumentError(absl::StrCat("micro-batches of ", listed,
                                                   " sequences in a step of ", batch.size()));
  }
  if (micro_batch_sizes.size() > 1 && cache_ != nullptr) {
    return MicroBatchesWithCacheError();
  }
  for (const SequenceChunk& s : batch) Place(s);
  // The offload makes room for its own sequences when their rows arrive.
  for (const SequenceChunk& s : batch) {
    if (s.cpu_attention) continue;
    const int64_t end = s.start_pos + static_cast<int64_t>(s.tokens.size());
    TANDEM_RETURN_IF_ERROR(s.block_table.empty() ? kv_->Reserve(s.seq_id, end)
                                                 : kv_->Adopt(s.seq_id, s.block_table, end));
  }
  const ModelConfig& c = config();
  const int64_t hidden = c.hidden_size;
  int64_t total = 0;
  bool prefill = false;
  for (const SequenceChunk& s : batch) {
    total += static_cast<int64_t>(s.tokens.size());
    prefill = prefill || s.tokens.size() > 1;
  }
  // n_g applies to steps that hold a prefill (ScheInfer: decode keeps 0).
  step_gpu_rows_ = prefill ? std::min(prefill_gpu_tokens_, total) : 0;

  TANDEM_RETURN_IF_ERROR(Grow(x_, total * hidden));
  TANDEM_RETURN_IF_ERROR(Grow(h_, total * hidden));
  TANDEM_RETURN_IF_ERROR(Grow(out_, total * hidden));
  positions_.resize(static_cast<size_t>(total));
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(total));
  for (const SequenceChunk& s : batch) {
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      positions_[ids.size()] = s.start_pos + static_cast<int64_t>(i);
      ids.push_back(s.tokens[i]);
    }
  }
  TANDEM_RETURN_IF_ERROR(dev_->Embedding(weights_.token_embd, ids.data(), total, x_.data()));

  // A step that fails part-way leaves streamed layers in flight out of
  // order: start the next one from scratch.
  struct PagerReset {
    WeightPager* pager;
    bool done = false;
    ~PagerReset() {
      if (pager != nullptr && !done) pager->Reset();
    }
  } pager_reset{pager_.get()};
  if (pager_ != nullptr) pager_->BeginStep();

  // Micro-batches of consecutive chunks: as listed, else of
  // micro_batch_size_ sequences (0: one for all).
  std::vector<int64_t> counts(micro_batch_sizes.begin(), micro_batch_sizes.end());
  const int64_t n = static_cast<int64_t>(batch.size());
  const int64_t mu = micro_batch_size_ > 0 ? micro_batch_size_ : n;
  for (int64_t at = 0; micro_batch_sizes.empty() && at < n; at += mu) {
    counts.push_back(std::min(mu, n - at));
  }
  std::vector<MicroBatch> mbs;
  size_t next = 0;
  int64_t row = 0;
  for (int64_t count : counts) {
    MicroBatch mb{next, next + static_cast<size_t>(count), row, 0};
    for (; next < mb.chunk1; ++next) mb.rows += static_cast<int64_t>(batch[next].tokens.size());
    row += mb.rows;
    mbs.push_back(mb);
  }
  const int64_t qd = heads_ * c.head_dim, kvd = kv_heads_ * c.head_dim;
  TANDEM_RETURN_IF_ERROR(Grow(q_, total * qd));
  TANDEM_RETURN_IF_ERROR(Grow(k_, total * kvd));
  TANDEM_RETURN_IF_ERROR(Grow(v_, total * kvd));
  TANDEM_RETURN_IF_ERROR(Grow(attn_, total * qd));
  for (int64_t l = 0; l < c.num_layers; ++l) TANDEM_RETURN_IF_ERROR(RunLayer(l, batch, mbs));
  row0_ = 0;

  pager_reset.done = true;

  // Final norm and LM head only on the rows whose logits are wanted.
  StepResult r;
  r.vocab = c.vocab_size;
  r.prefill_gpu_rows = step_gpu_rows_;
  int64_t rows = 0, tok = 0;
  std::vector<int64_t> kept;  // rows of x_ whose logits are wanted
  for (const SequenceChunk& s : batch) {
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    const int64_t keep = s.all_logits ? n : 1;
    r.first_row.push_back(rows);
    r.num_rows.push_back(keep);
    for (int64_t i = n - keep; i < n; ++i) kept.push_back(tok + i);
    rows += keep;
    tok += n;
  }
  TANDEM_RETURN_IF_ERROR(dev_->GatherRows(x_.data(), hidden, kept.data(), rows, h_.data()));
  TANDEM_RETURN_IF_ERROR(dev_->RmsNorm(h_.data(), rows, hidden, weights_.output_norm.data(),
                                       c.rms_norm_eps, h_.data()));
  const bool pick_on_device =
      !dev_->host_memory() && std::all_of(batch.begin(), batch.end(), [](const SequenceChunk& s) {
        return s.greedy_only && !s.all_logits;
      });
  if (dev_->host_memory()) {
    r.logits.resize(static_cast<size_t>(rows * c.vocab_size));
    TANDEM_RETURN_IF_ERROR(
        dev_->Linear(h_.data(), rows, weights_.lm_head, nullptr, r.logits.data()));
  } else {
    TANDEM_RETURN_IF_ERROR(Grow(logits_, rows * c.vocab_size));
    TANDEM_RETURN_IF_ERROR(
        dev_->Linear(h_.data(), rows, weights_.lm_head, nullptr, logits_.data()));
    if (pick_on_device) {
      // One row per chunk: none wants all of its rows.
      r.greedy_ids.resize(static_cast<size_t>(rows));
      r.greedy_logprobs.resize(static_cast<size_t>(rows));
      TANDEM_RETURN_IF_ERROR(dev_->GreedyPick(logits_.data(), rows, c.vocab_size,
                                              r.greedy_ids.data(), r.greedy_logprobs.data()));
    } else {
      r.logits.resize(static_cast<size_t>(rows * c.vocab_size));
      TANDEM_RETURN_IF_ERROR(
          dev_->CopyToHost(logits_.data(), r.logits.size() * sizeof(float), r.logits.data()));
    }
  }

  for (const SequenceChunk& s : batch) {
    seq_len_[s.seq_id] = s.start_pos + static_cast<int64_t>(s.tokens.size());
  }
  return r;
}

// One layer over the step's micro-batches. With one micro-batch this is the
// plain order: project, send the offloaded rows, attend locally meanwhile,
// collect, o_proj and FFN. With several (MoE-Lightning's CGOPipe, within a
// layer), micro-batch j is projected and attends locally while the offload
// works on j - 1; then j - 1 is collected, j sent, and j - 1's o_proj and
// FFN run while the offload works on j. The offload holds one micro-batch
// at a time, so the CPU's attention of each overlaps the device's work on
// its neighbours. Every micro-batch runs the FFN from the same weights: a
// streamed layer is staged once for all of them.
absl::Status Engine::RunLayer(int64_t l, const std::vector<SequenceChunk>& batch,
                              const std::vector<MicroBatch>& mbs) {
  const ModelConfig& c = config();
  const int64_t hidden = c.hidden_size;
  const LayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
  const int64_t total = mbs.back().row0 + mbs.back().rows;
  TANDEM_RETURN_IF_ERROR(
      dev_->RmsNorm(x_.data(), total, hidden, lw.attn_norm.data(), c.rms_norm_eps, h_.data()));
  const bool streamed = pager_ != nullptr && pager_->IsStreamed(l);
  LayerWeights staged;  // the streamed FFN, once acquired
  bool acquired = false;
  auto finish = [&](const MicroBatch& mb) -> absl::Status {
    if (streamed && !acquired) {
      // Host-resident FFN: computed from the copy streamed in while the
      // previous streamed layer ran (acquired as late as possible, so the
      // copy overlaps this layer's attention).
      TANDEM_ASSIGN_OR_RETURN(std::vector<const void*> at, pager_->Acquire(l));
      staged = StagedFfn(lw, at);
      acquired = true;
    }
    return FinishLayer(l, lw, streamed ? staged : lw, mb);
  };
  // Jobs submitted and not yet collected. A step that fails meanwhile
  // waits for them (dropping their result), so that the offload, which
  // holds one Submit at a time, takes the next step's.
  struct Drain {
    AttentionOffload* offload;
    int64_t layer;
    OffloadedAttention* in_flight = nullptr;
    ~Drain() {
      if (in_flight != nullptr) (void)offload->Collect(layer, in_flight->jobs);
    }
  } drain{attn_offload_, l};
  auto submit = [&](OffloadedAttention& o) -> absl::Status {
    if (o.jobs.empty()) return absl::OkStatus();
    TANDEM_RETURN_IF_ERROR(attn_offload_->Submit(l, o.jobs));
    drain.in_flight = &o;
    return absl::OkStatus();
  };
  auto collect = [&](const MicroBatch& mb, OffloadedAttention& o) -> absl::Status {
    if (drain.in_flight == &o) drain.in_flight = nullptr;  // Collect consumes it either way
    return CollectJobs(l, batch, mb, o);
  };
  for (size_t j = 0; j <= mbs.size(); ++j) {
    if (j < mbs.size()) {
      TANDEM_RETURN_IF_ERROR(Project(l, mbs[j]));
      TANDEM_RETURN_IF_ERROR(StageJobs(batch, mbs[j], offloaded_[j % 2]));
      if (j == 0) TANDEM_RETURN_IF_ERROR(submit(offloaded_[0]));
      TANDEM_RETURN_IF_ERROR(AttendLocal(l, batch, mbs[j]));
    }
    if (j == 0) continue;
    TANDEM_RETURN_IF_ERROR(collect(mbs[j - 1], offloaded_[(j - 1) % 2]));
    if (j < mbs.size()) TANDEM_RETURN_IF_ERROR(submit(offloaded_[j % 2]));
    TANDEM_RETURN_IF_ERROR(finish(mbs[j - 1]));
  }
  if (acquired) {
    // The next layer's pages overwrite this buffer: on a device whose ops
    // are queued, they must have read it first.
    if (!dev_->host_memory()) TANDEM_RETURN_IF_ERROR(dev_->Synchronize());
    pager_->Release(l);
  }
  return absl::OkStatus();
}

absl::Status Engine::FinishLayer(int64_t l, const LayerWeights& lw, const LayerWeights& ffn,
                                 const MicroBatch& mb) {
  const ModelConfig& c = config();
  const int64_t hidden = c.hidden_size, qd = heads_ * c.head_dim;
  const int64_t rows = mb.rows;
  row0_ = mb.row0;
  float* const x = x_.data() + mb.row0 * hidden;
  const float* ob = lw.o_bias.empty() ? nullptr : lw.o_bias.data();
  const float* attn = attn_.data() + mb.row0 * qd;
  if (tp_ == nullptr) {
    TANDEM_RETURN_IF_ERROR(dev_->Linear(attn, rows, lw.o, ob, FfnOut()));
  } else {
    // Row-parallel: the partial products are summed first, the bias added
    // once (host memory: tensor parallelism runs on the host device only).
    TANDEM_RETURN_IF_ERROR(dev_->Linear(attn, rows, lw.o, nullptr, FfnOut()));
    TANDEM_RETURN_IF_ERROR(ReduceOut(rows));
    if (ob != nullptr) TANDEM_RETURN_IF_ERROR(dev_->AddBias(ob, rows, hidden, FfnOut()));
  }
  TANDEM_RETURN_IF_ERROR(dev_->AddScaled(FfnOut(), 1.0f, rows * hidden, x));
  TANDEM_RETURN_IF_ERROR(
      dev_->RmsNorm(x, rows, hidden, lw.ffn_norm.data(), c.rms_norm_eps, FfnIn()));
  TANDEM_RETURN_IF_ERROR(Ffn(l, ffn, rows));
  TANDEM_RETURN_IF_ERROR(ReduceOut(rows));
  return dev_->AddScaled(FfnOut(), 1.0f, rows * hidden, x);
}

absl::Status Engine::ReduceOut(int64_t rows) {
  if (tp_ == nullptr) return absl::OkStatus();
  // The group's collective runs outside the device's queue (NCCL on its own
  // stream): the partial sums must be complete first.
  if (!dev_->host_memory()) TANDEM_RETURN_IF_ERROR(dev_->Synchronize());
  return tp_->Sum(FfnOut(), rows * config().hidden_size);
}

// ops::RmsNorm's formula, x * rsqrt(mean(x^2) + eps) * w, with the mean over
// the whole projection: each rank's sum of squares per row is all-reduced.
absl::Status Engine::ShardedFullNorm(float* x, int64_t rows, int64_t dim, int64_t full_dim,
                                     const float* w) {
  TANDEM_RETURN_IF_ERROR(Grow(sumsq_, rows));
  TANDEM_RETURN_IF_ERROR(dev_->RowSumSquares(x, rows, dim, sumsq_.data()));
  // The sum reads device memory outside the device's queue (NCCL's own
  // stream, or the host's shared memory).
  if (!dev_->host_memory()) TANDEM_RETURN_IF_ERROR(dev_->Synchronize());
  TANDEM_RETURN_IF_ERROR(tp_->Sum(sumsq_.data(), rows));
  return dev_->ScaleRms(x, rows, dim, sumsq_.data(), full_dim, config().rms_norm_eps, w);
}

}  // namespace tandem
