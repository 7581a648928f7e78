#include "common/gguf_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint_schema.h"
#include "common/status_macros.h"

namespace tandem {

namespace {

constexpr const char* kSupportedGguf = "llama, qwen2, qwen2moe, qwen3moe, olmoe";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Metadata access with the file's name in every error.
class Meta {
 public:
  Meta(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string Key(const char* k) const { return absl::StrCat(arch_, ".", k); }

  // Optional integer; an array of equal integers (per-layer values) counts as one.
  absl::StatusOr<std::optional<int64_t>> Int(const std::string& key) const {
    const GgufValue* v = f_.Find(key);
    if (v == nullptr) return std::optional<int64_t>();
    if (v->is_array() && v->elem_type != GgufType::kString && v->elem_type != GgufType::kArray &&
        !v->ints.empty()) {
      const int64_t first = v->ints.front();
      for (int64_t x : v->ints) {
        if (x != first) {
          return absl::UnimplementedError(absl::StrCat(
              f_.path(), ": metadata '", key, "' varies per layer, which is not supported"));
        }
      }
      return std::optional<int64_t>(first);
    }
    TANDEM_ASSIGN_OR_RETURN(int64_t x, f_.GetInt(key));
    return std::optional<int64_t>(x);
  }
  absl::StatusOr<int64_t> RequiredInt(const std::string& key) const {
    TANDEM_ASSIGN_OR_RETURN(auto v, Int(key));
    if (!v) {
      return absl::InvalidArgumentError(
          absl::StrCat(f_.path(), ": required metadata key '", key, "' is missing"));
    }
    return *v;
  }
  absl::StatusOr<std::optional<double>> Float(const std::string& key) const {
    if (f_.Find(key) == nullptr) return std::optional<double>();
    TANDEM_ASSIGN_OR_RETURN(double x, f_.GetFloat(key));
    return std::optional<double>(x);
  }
  absl::StatusOr<std::optional<std::string>> String(const std::string& key) const {
    if (f_.Find(key) == nullptr) return std::optional<std::string>();
    TANDEM_ASSIGN_OR_RETURN(std::string x, f_.GetString(key));
    return std::optional<std::string>(std::move(x));
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

}  // namespace

absl::StatusOr<ModelConfig> ModelConfigFromGguf(const GgufFile& f) {
  const std::string& path = f.path();
  if (f.Find("general.architecture") == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": metadata key 'general.architecture' is missing"));
  }
  TANDEM_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  ModelConfig c;
  c.arch_name = arch;
  if (arch == "llama") {
    c.arch = Arch::kLlama;
  } else if (arch == "qwen2") {
    c.arch = Arch::kQwen2;
  } else if (arch == "qwen2moe") {
    c.arch = Arch::kQwen2Moe;
  } else if (arch == "qwen3moe") {
    c.arch = Arch::kQwen3Moe;
  } else if (arch == "olmoe") {
    c.arch = Arch::kOlmoe;
  } else {
    return absl::UnimplementedError(absl::StrCat("unsupported architecture '", arch, "' in ", path,
                                                 "; supported: ", kSupportedGguf));
  }
  const Meta m(f, arch);
  TANDEM_ASSIGN_OR_RETURN(c.num_layers, m.RequiredInt(m.Key("block_count")));
  TANDEM_ASSIGN_OR_RETURN(c.hidden_size, m.RequiredInt(m.Key("embedding_length")));
  TANDEM_ASSIGN_OR_RETURN(c.num_heads, m.RequiredInt(m.Key("attention.head_count")));
  TANDEM_ASSIGN_OR_RETURN(auto kv_heads, m.Int(m.Key("attention.head_count_kv")));
  c.num_kv_heads = kv_heads.value_or(c.num_heads);
  TANDEM_ASSIGN_OR_RETURN(auto ff, m.Int(m.Key("feed_forward_length")));
  c.intermediate_size = ff.value_or(0);
  TANDEM_ASSIGN_OR_RETURN(auto key_len, m.Int(m.Key("attention.key_length")));
  if (key_len) {
    c.head_dim = *key_len;
  } else {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": embedding_length ", c.hidden_size,
                                                     " is not a multiple of head_count ",
                                                     c.num_heads));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  TANDEM_ASSIGN_OR_RETURN(auto value_len, m.Int(m.Key("attention.value_length")));
  if (value_len && *value_len != c.head_dim) {
    return absl::UnimplementedError(absl::StrCat(
        path, ": value_length ", *value_len, " != key_length ", c.head_dim, " is not supported"));
  }
  TANDEM_ASSIGN_OR_RETURN(auto rope_dims, m.Int(m.Key("rope.dimension_count")));
  if (rope_dims && *rope_dims != c.head_dim) {
    return absl::UnimplementedError(absl::StrCat(path, ": partial rotary embedding (", *rope_dims,
                                                 " of ", c.head_dim,
                                                 " dimensions) is not supported"));
  }
  TANDEM_ASSIGN_OR_RETURN(auto eps, m.Float(m.Key("attention.layer_norm_rms_epsilon")));
  if (!eps) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": required metadata key '",
                                                   m.Key("attention.layer_norm_rms_epsilon"),
                                                   "' is missing"));
  }
  c.rms_norm_eps = static_cast<float>(*eps);
  TANDEM_ASSIGN_OR_RETURN(auto theta, m.Float(m.Key("rope.freq_base")));
  c.rope_theta = static_cast<float>(theta.value_or(10000.0));
  TANDEM_ASSIGN_OR_RETURN(auto ctx, m.Int(m.Key("context_length")));
  if (ctx) c.max_position = *ctx;
  TANDEM_ASSIGN_OR_RETURN(auto sw, m.Int(m.Key("attention.sliding_window")));
  c.sliding_window = sw.value_or(0);

  // RoPE scaling.
  TANDEM_ASSIGN_OR_RETURN(auto rs_type, m.String(m.Key("rope.scaling.type")));
  TANDEM_ASSIGN_OR_RETURN(auto rs_factor, m.Float(m.Key("rope.scaling.factor")));
  TANDEM_ASSIGN_OR_RETURN(auto scale_linear, m.Float(m.Key("rope.scale_linear")));
  if (rs_type && *rs_type != "none") {
    if (*rs_type != "linear") {
      return absl::UnimplementedError(absl::StrCat(path, ": unsupported rope scaling type '",
                                                   *rs_type, "'; supported: none, linear"));
    }
    if (!rs_factor) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": linear rope scaling without rope.scaling.factor"));
    }
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = static_cast<float>(*rs_factor);
  } else if (!rs_type && scale_linear && *scale_linear != 1.0) {
    c.rope_scaling.type = RopeScaling::Type::kLinear;
    c.rope_scaling.factor = static_cast<float>(*scale_linear);
  }

  // Mixture of experts.
  TANDEM_ASSIGN_OR_RETURN(auto n_exp, m.Int(m.Key("expert_count")));
  if (c.arch == Arch::kLlama && n_exp.value_or(0) > 0) c.arch = Arch::kMixtral;
  if (c.arch != Arch::kLlama && c.arch != Arch::kQwen2) {
    c.num_experts = n_exp.value_or(0);
    TANDEM_ASSIGN_OR_RETURN(auto used, m.Int(m.Key("expert_used_count")));
    c.num_experts_per_tok = used.value_or(0);
    TANDEM_ASSIGN_OR_RETURN(auto exp_ff, m.Int(m.Key("expert_feed_forward_length")));
    c.moe_intermediate_size = exp_ff ? *exp_ff : c.intermediate_size;
    if (c.arch == Arch::kQwen2Moe) {
      TANDEM_ASSIGN_OR_RETURN(auto sh, m.Int(m.Key("expert_shared_feed_forward_length")));
      c.shared_expert_intermediate_size = sh.value_or(0);
      // Older conversions omit the key: take the width from the tensor.
      if (!sh) {
        if (const GgufTensorInfo* t = f.FindTensor("blk.0.ffn_gate_shexp.weight");
            t != nullptr && !t->shape.empty()) {
          c.shared_expert_intermediate_size = t->shape[0];
        }
      }
    }
    TANDEM_ASSIGN_OR_RETURN(auto norm, m.Int(m.Key("expert_weights_norm")));
    // llama.cpp's defaults: Mixtral and qwen3moe renormalise, the others do not.
    c.norm_topk_prob = norm ? *norm != 0 : (c.arch == Arch::kMixtral || c.arch == Arch::kQwen3Moe);
    if (c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
      for (int64_t l = 0; l < std::min<int64_t>(c.num_layers, 4096); ++l) {
        const std::string b = absl::StrCat("blk.", l, ".");
        if (f.FindTensor(b + "ffn_gate_inp.weight") == nullptr &&
            f.FindTensor(b + "ffn_gate.weight") != nullptr) {
          c.mlp_only_layers.push_back(l);
        }
      }
    }
  }

  // Vocabulary and special tokens.
  TANDEM_ASSIGN_OR_RETURN(auto vocab, m.Int(m.Key("vocab_size")));
  if (vocab) {
    c.vocab_size = *vocab;
  } else if (const GgufValue* toks = f.Find("tokenizer.ggml.tokens");
             toks != nullptr && toks->is_array()) {
    c.vocab_size = static_cast<int64_t>(toks->array_size());
  } else if (const GgufTensorInfo* emb = f.FindTensor("token_embd.weight");
             emb != nullptr && !emb->shape.empty()) {
    c.vocab_size = emb->shape[0];
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot tell the vocabulary size"));
  }
  TANDEM_ASSIGN_OR_RETURN(auto bos, m.Int("tokenizer.ggml.bos_token_id"));
  c.bos_token_id = bos.value_or(-1);
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                        "tokenizer.ggml.eom_token_id"}) {
    TANDEM_ASSIGN_OR_RETURN(auto id, m.Int(k));
    if (id &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(*id);
    }
  }

  // Layout details decided by the architecture and the tensors present.
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  c.rope_style = (c.arch == Arch::kLlama || c.arch == Arch::kMixtral) ? RopeStyle::kInterleaved
                                                                      : RopeStyle::kNeox;
  if (c.arch == Arch::kQwen2 || c.arch == Arch::kQwen2Moe) {
    c.qkv_bias = true;
  } else {
    c.qkv_bias = f.FindTensor("blk.0.attn_q.bias") != nullptr;
    c.attn_output_bias = f.FindTensor("blk.0.attn_output.bias") != nullptr;
  }
  if (c.arch == Arch::kQwen3Moe) c.qk_norm = QkNorm::kPerHead;
  if (c.arch == Arch::kOlmoe) c.qk_norm = QkNorm::kFull;

  DropUnreachableEos(&c);
  if (absl::Status s = c.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": invalid model metadata: ", s.message()));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<GgufCheckpoint>> GgufCheckpoint::Open(const std::string& path) {
  std::unique_ptr<GgufCheckpoint> c(new GgufCheckpoint());
  TANDEM_ASSIGN_OR_RETURN(c->file_, GgufFile::Open(path));
  TANDEM_ASSIGN_OR_RETURN(c->config_, ModelConfigFromGguf(*c->file_));
  TANDEM_RETURN_IF_ERROR(c->CheckExpertStacks());
  TANDEM_RETURN_IF_ERROR(ValidateCheckpointTensors(*c, nullptr));
  for (const GgufTensorInfo& t : c->file_->tensors()) {
    if (t.converted) {
      c->cache_ = ConvertedCache::ForModel(path, &c->no_cache_reason_);
      break;
    }
  }
  return c;
}

absl::Status GgufCheckpoint::CheckExpertStacks() const {
  for (const GgufTensorInfo& t : file_->tensors()) {
    if (!EndsWith(t.name, "_exps.weight")) continue;
    if (t.shape.size() != 3 || t.shape[0] != config_.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat(
          path(), ": tensor '", t.name, "' has shape ", ShapeString(t.shape), ", expected [",
          config_.num_experts, ", rows, cols] (one slice per expert)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> GgufCheckpoint::Tensor(std::string_view name) const {
  return TensorImpl(name, /*with_data=*/true);
}

absl::StatusOr<TensorView> GgufCheckpoint::DescribeTensor(std::string_view name) const {
  return TensorImpl(name, /*with_data=*/false);
}

absl::StatusOr<TensorView> GgufCheckpoint::ExpertTensor(std::string_view base,
                                                        int64_t expert) const {
  return ExpertTensorImpl(base, expert, /*with_data=*/true);
}

absl::StatusOr<TensorView> GgufCheckpoint::DescribeExpertTensor(std::string_view base,
                                                                int64_t expert) const {
  return ExpertTensorImpl(base, expert, /*with_data=*/false);
}

absl::StatusOr<const void*> GgufCheckpoint::Data(const GgufTensorInfo& info) const {
  if (!info.converted) return static_cast<const void*>(file_->StoredData(info));
  absl::MutexLock lock(&mu_);
  if (auto it = converted_.find(info.name); it != converted_.end()) return it->second.data;
  const TensorView view = file_->View(info);
  const ConvertedCache::Entry entry{info.name, static_cast<uint32_t>(*info.converted), info.dtype,
                                    view.nbytes};
  Converted c;
  if (cache_ != nullptr) c.mapped = cache_->Find(entry);
  if (c.mapped != nullptr) {
    ++stats_.mapped;
  } else {
    const auto start = std::chrono::steady_clock::now();
    // 64-byte aligned, as the kernels' loads prefer; aligned_alloc wants a multiple.
    const size_t size = (static_cast<size_t>(view.nbytes) + 63) / 64 * 64;
    c.heap.reset(static_cast<uint8_t*>(std::aligned_alloc(64, std::max<size_t>(size, 64))));
    if (c.heap == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(path(), ": no memory for the ", view.nbytes, " bytes of tensor '", info.name,
                       "' converted to ", std::string(DTypeName(info.dtype))));
    }
    // On every core: a model's first load converts gigabytes (a Q6_K tensor at about
    // 170M elements a second on one Zen 4 core).
    const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    if (absl::Status st = ConvertQuantBlocks(*info.converted, file_->StoredData(info), view.numel(),
                                             c.heap.get(), threads);
        !st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path(), ": tensor '", info.name, "' (", std::string(ConvertedQuantName(*info.converted)),
          "): ", std::string(st.message())));
    }
    // Stored, the pages are the page cache's to share and reclaim; where the cache
    // cannot take it (a full disk), the conversion stays in process memory.
    if (cache_ != nullptr) {
      if (auto m = cache_->Store(entry, c.heap.get()); m.ok()) {
        c.mapped = std::move(*m);
        c.heap.reset();
      }
    }
    ++stats_.made[std::string(ConvertedQuantName(*info.converted))];
    stats_.in_memory |= c.mapped == nullptr;
    stats_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  stats_.bytes += view.nbytes;
  c.data = c.mapped != nullptr
               ? static_cast<const void*>(c.mapped->data() + ConvertedCache::kHeaderBytes)
               : static_cast<const void*>(c.heap.get());
  const void* data = c.data;
  converted_.emplace(info.name, std::move(c));
  return data;
}

std::string GgufCheckpoint::LoadNote() const {
  absl::MutexLock lock(&mu_);
  int made = 0;
  std::string types;
  for (const auto& [name, n] : stats_.made) {
    made += n;
    absl::StrAppend(&types, types.empty() ? "" : ", ", name, " ", n);
  }
  if (made == 0 && stats_.mapped == 0) return "";
  const std::string where = cache_ != nullptr
                                ? cache_->dir()
                                : absl::StrCat("process memory (no cache: ", no_cache_reason_, ")");
  std::string note;
  if (made > 0) {
    note = absl::StrFormat("converted %d GGUF tensors (%s) to Q4_1/Q8_0 in %.1f s, into %s", made,
                           types, stats_.seconds,
                           stats_.in_memory && cache_ != nullptr
                               ? absl::StrCat(where,
                                              " and, where it could not store them, "
                                              "process memory")
                               : where);
  }
  if (stats_.mapped > 0) {
    absl::StrAppend(&note, note.empty() ? "" : "; ",
                    absl::StrFormat("mapped %d converted tensors from %s", stats_.mapped,
                                    cache_ != nullptr ? cache_->dir() : where));
  }
  absl::StrAppendFormat(&note, " (%.2f GB)", static_cast<double>(stats_.bytes) / 1e9);
  return note;
}

absl::StatusOr<TensorView> GgufCheckpoint::TensorImpl(std::string_view name, bool with_data) const {
  const GgufTensorInfo* info = file_->FindTensor(name);
  if (info == nullptr) {
    const bool tied = name == "output.weight" && config_.tie_word_embeddings;
    return absl::NotFoundError(
        absl::StrCat(path(), ": missing tensor '", std::string(name), "'",
                     tied ? " (embeddings are tied: use token_embd.weight)" : ""));
  }
  TensorView v = file_->View(*info);
  if (with_data) {
    TANDEM_ASSIGN_OR_RETURN(v.data, Data(*info));
  }
  // llama.cpp stores the shared-expert gate as a vector; expose it as [1, hidden].
  if (EndsWith(name, "ffn_gate_inp_shexp.weight") && v.rank() == 1) v.shape = {1, v.shape[0]};
  return v;
}

bool GgufCheckpoint::HasTensor(std::string_view name) const {
  return file_->FindTensor(name) != nullptr;
}

absl::StatusOr<TensorView> GgufCheckpoint::ExpertTensorImpl(std::string_view base_in,
                                                            int64_t expert, bool with_data) const {
  std::string base(base_in);
  if (EndsWith(base, ".weight")) base.resize(base.size() - 7);
  if (expert < 0 || expert >= config_.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(path(), ": expert index ", expert,
                                                   " out of range (the model has ",
                                                   config_.num_experts, " experts)"));
  }
  const std::string stacked = base + ".weight";
  if (const GgufTensorInfo* info = file_->FindTensor(stacked); info != nullptr) {
    if (info->shape.size() != 3 || info->shape[0] != config_.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat(path(), ": tensor '", stacked, "' is not a stack of ", config_.num_experts,
                       " experts (shape ", ShapeString(info->shape), ")"));
    }
    // A slice is whole rows, so whole quantization blocks.
    TensorView v = file_->View(*info);
    const int64_t per = v.nbytes / info->shape[0];
    v.name = absl::StrCat(stacked, "[", expert, "]");
    v.shape = {info->shape[1], info->shape[2]};
    v.nbytes = per;
    if (with_data) {
      TANDEM_ASSIGN_OR_RETURN(const void* data, Data(*info));
      v.data = static_cast<const uint8_t*>(data) + expert * per;
    }
    return v;
  }
  if (EndsWith(base, "_exps")) {
    const std::string legacy =
        absl::StrCat(base.substr(0, base.size() - 5), ".", expert, ".weight");
    if (file_->FindTensor(legacy) != nullptr) return TensorImpl(legacy, with_data);
  }
  return absl::NotFoundError(
      absl::StrCat(path(), ": missing tensor '", stacked, "' (expert ", expert, ")"));
}

}  // namespace tandem
