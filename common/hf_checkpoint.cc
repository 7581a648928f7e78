#include "common/hf_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/checkpoint_schema.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "common/tensor_names.h"

namespace tandem {

using nlohmann::json;

namespace {

bool IsRegularFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool PathExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string Join(const std::string& dir, const std::string& name) {
  return absl::StrCat(dir, "/", name);
}

// A shard name from an index must stay inside the directory.
bool SafeRelativeName(const std::string& f) {
  if (f.empty() || f[0] == '/') return false;
  size_t start = 0;
  while (start <= f.size()) {
    size_t end = f.find('/', start);
    if (end == std::string::npos) end = f.size();
    const std::string part = f.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

std::string ExpertKey(const std::string& base, int64_t e) { return absl::StrCat(base, "#", e); }

}  // namespace

absl::Status ParseGenerationConfig(const json& j, const std::string& source,
                                   GenerationDefaults* out, std::vector<int64_t>* eos) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object, got ", json_util::TypeName(j)));
  }
  TANDEM_ASSIGN_OR_RETURN(auto temperature, json_util::OptDouble(j, "temperature", source));
  TANDEM_ASSIGN_OR_RETURN(auto top_p, json_util::OptDouble(j, "top_p", source));
  TANDEM_ASSIGN_OR_RETURN(auto top_k, json_util::OptInt(j, "top_k", source));
  TANDEM_ASSIGN_OR_RETURN(auto do_sample, json_util::OptBool(j, "do_sample", source));
  if (temperature) out->temperature = static_cast<float>(*temperature);
  if (top_p) out->top_p = static_cast<float>(*top_p);
  if (top_k) out->top_k = *top_k;
  if (do_sample) out->do_sample = *do_sample;
  if (out->temperature < 0 || out->top_p < 0 || out->top_p > 1 || out->top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": out-of-range sampling defaults (temperature ", out->temperature,
                     ", top_p ", out->top_p, ", top_k ", out->top_k, ")"));
  }
  if (const json* e = json_util::Find(j, "eos_token_id"); e != nullptr) {
    TANDEM_ASSIGN_OR_RETURN(auto ids, json_util::AsIntOrIntList(*e, source, "key 'eos_token_id'"));
    for (int64_t id : ids) {
      if (std::find(eos->begin(), eos->end(), id) == eos->end()) eos->push_back(id);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HfCheckpoint>> HfCheckpoint::Open(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::unique_ptr<HfCheckpoint> c(new HfCheckpoint());
  c->dir_ = dir;

  const std::string config_path = Join(dir, "config.json");
  if (!PathExists(config_path)) {
    return absl::NotFoundError(absl::StrCat(
        config_path, ": missing config.json (a Hugging Face checkpoint directory needs one)"));
  }
  TANDEM_ASSIGN_OR_RETURN(json config_json, json_util::ReadFile(config_path));
  TANDEM_ASSIGN_OR_RETURN(c->config_, ModelConfigFromHfJson(config_json, config_path));

  const std::string gen_path = Join(dir, "generation_config.json");
  if (PathExists(gen_path)) {
    TANDEM_ASSIGN_OR_RETURN(json gen_json, json_util::ReadFile(gen_path));
    TANDEM_RETURN_IF_ERROR(
        ParseGenerationConfig(gen_json, gen_path, &c->generation_, &c->config_.eos_token_ids));
    DropUnreachableEos(&c->config_);
    if (absl::Status s = c->config_.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(gen_path, ": ", s.message()));
    }
  }

  TANDEM_RETURN_IF_ERROR(c->LoadWeights());
  if (c->config_.tie_word_embeddings) c->tensors_.erase("output.weight");
  TANDEM_RETURN_IF_ERROR(ValidateCheckpointTensors(
      *c, [p = c.get()](const std::string& name, int64_t e) { return p->Describe(name, e); }));

  if (IsRegularFile(Join(dir, "tokenizer.json"))) c->tokenizer_json_ = Join(dir, "tokenizer.json");
  if (IsRegularFile(Join(dir, "tokenizer_config.json"))) {
    c->tokenizer_config_ = Join(dir, "tokenizer_config.json");
  }
  return c;
}

absl::Status HfCheckpoint::LoadWeights() {
  const std::string index_path = Join(dir_, "model.safetensors.index.json");
  const std::string single_path = Join(dir_, "model.safetensors");
  if (PathExists(index_path)) {
    TANDEM_ASSIGN_OR_RETURN(json index, json_util::ReadFile(index_path));
    const json* wm = json_util::Find(index, "weight_map");
    if (wm == nullptr || !wm->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": missing or non-object 'weight_map'"));
    }
    std::set<std::string> shard_names;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry '", it.key(),
                                                       "' must be a file name string"));
      }
      const std::string f = it.value().get<std::string>();
      if (!SafeRelativeName(f)) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map entry '", it.key(),
                                                       "' names an unsafe path '", f, "'"));
      }
      shard_names.insert(f);
    }
    std::map<std::string, const SafetensorsFile*> by_name;
    for (const std::string& f : shard_names) {
      const std::string p = Join(dir_, f);
      if (!PathExists(p)) {
        return absl::NotFoundError(absl::StrCat(p, ": missing shard file named in ", index_path));
      }
      TANDEM_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p));
      by_name[f] = file.get();
      files_.push_back(std::move(file));
    }
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      const SafetensorsFile* f = by_name[it.value().get<std::string>()];
      if (f->Find(it.key()) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map puts tensor '",
                                                       it.key(), "' in ", f->path(),
                                                       " but that file does not contain it"));
      }
    }
  } else if (PathExists(single_path)) {
    TANDEM_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single_path));
    files_.push_back(std::move(file));
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir_,
                     ": no model.safetensors or model.safetensors.index.json (only safetensors "
                     "weights are supported)"));
  }
  for (const auto& f : files_) {
    for (const SafetensorsTensor& t : f->tensors()) TANDEM_RETURN_IF_ERROR(AddTensor(*f, t));
  }
  return absl::OkStatus();
}

absl::Status HfCheckpoint::AddTensor(const SafetensorsFile& file, const SafetensorsTensor& t) {
  const std::optional<HfTensorRef> ref = MapHfTensorName(config_.arch, t.name);
  if (!ref) return absl::OkStatus();  // not used by Tandem
  const std::string origin = absl::StrCat("'", t.name, "' in ", file.path());
  if (ref->layer >= config_.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.path(), ": tensor '", t.name, "' is for layer ", ref->layer,
                     " but the config has ", config_.num_layers, " layers"));
  }
  TensorView v = file.View(t);
  switch (ref->kind) {
    case HfTensorRef::Kind::kPlain: {
      v.name = ref->canonical;
      auto [it, inserted] = tensors_.emplace(ref->canonical, v);
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(file.path(), ": tensor '", ref->canonical, "' appears twice: as ",
                         origin_[ref->canonical], " and as ", origin));
      }
      origin_[ref->canonical] = origin;
      return absl::OkStatus();
    }
    case HfTensorRef::Kind::kExpert:
      return AddExpert(ref->canonical, ref->expert, v, origin);
    case HfTensorRef::Kind::kFusedGateUp:
    case HfTensorRef::Kind::kFusedDown: {
      const bool gate_up = ref->kind == HfTensorRef::Kind::kFusedGateUp;
      if (v.rank() != 3 || v.dim(0) != config_.num_experts || (gate_up && v.dim(1) % 2 != 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(file.path(), ": fused expert tensor '", t.name, "' has shape ",
                         ShapeString(v.shape), ", expected [", config_.num_experts,
                         gate_up ? ", 2 * ffn, hidden]" : ", hidden, ffn]"));
      }
      const int64_t es = DTypeBlockBytes(v.dtype);
      const int64_t rows = gate_up ? v.dim(1) / 2 : v.dim(1);
      const int64_t slice = rows * v.dim(2) * es;
      const auto* base = static_cast<const uint8_t*>(v.data);
      for (int64_t e = 0; e < v.dim(0); ++e) {
        TensorView part;
        part.dtype = v.dtype;
        part.shape = {rows, v.dim(2)};
        part.nbytes = slice;
        const int64_t stride = gate_up ? 2 * slice : slice;
        part.data = base + e * stride;
        if (gate_up) {
          TANDEM_RETURN_IF_ERROR(AddExpert(ExpertBase(ref->layer, "gate"), e, part, origin));
          part.data = base + e * stride + slice;
          TANDEM_RETURN_IF_ERROR(AddExpert(ExpertBase(ref->layer, "up"), e, part, origin));
        } else {
          TANDEM_RETURN_IF_ERROR(AddExpert(ExpertBase(ref->layer, "down"), e, part, origin));
        }
      }
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status HfCheckpoint::AddExpert(const std::string& base, int64_t expert, TensorView v,
                                     const std::string& origin) {
  if (expert >= config_.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": tensor ", origin, " is for expert ",
                                                   expert, " but the config has ",
                                                   config_.num_experts, " experts"));
  }
  std::vector<TensorView>& list = experts_[base];
  if (list.empty()) list.resize(static_cast<size_t>(config_.num_experts));
  TensorView& slot = list[static_cast<size_t>(expert)];
  const std::string key = ExpertKey(base, expert);
  if (slot.data != nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": expert ", expert, " of '", base,
                                                   "' appears twice: as ", origin_[key], " and as ",
                                                   origin));
  }
  v.name = absl::StrCat(base, ".weight[", expert, "]");
  slot = std::move(v);
  origin_[key] = origin;
  return absl::OkStatus();
}

std::string HfCheckpoint::Describe(const std::string& name, int64_t expert) const {
  const std::string key = expert >= 0 ? ExpertKey(name, expert) : name;
  if (auto it = origin_.find(key); it != origin_.end())
    return absl::StrCat("stored as ", it->second);
  const std::string hf = HfNameForCanonical(config_.arch, name, expert);
  return hf.empty() ? "" : absl::StrCat("HF name '", hf, "'");
}

absl::StatusOr<TensorView> HfCheckpoint::Tensor(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  const std::string n(name);
  std::string hint;
  if (n == "output.weight" && config_.tie_word_embeddings) {
    hint = " (embeddings are tied: use token_embd.weight)";
  } else if (std::string hf = HfNameForCanonical(config_.arch, n); !hf.empty()) {
    hint = absl::StrCat(" (HF name '", hf, "')");
  }
  return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor '", n, "'", hint));
}

bool HfCheckpoint::HasTensor(std::string_view name) const { return tensors_.count(name) != 0; }

absl::StatusOr<TensorView> HfCheckpoint::ExpertTensor(std::string_view base_in,
                                                      int64_t expert) const {
  std::string_view base = base_in;
  if (base.size() > 7 && base.substr(base.size() - 7) == ".weight") base.remove_suffix(7);
  if (expert < 0 || expert >= config_.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(dir_, ": expert index ", expert,
                                                   " out of range (the model has ",
                                                   config_.num_experts, " experts)"));
  }
  auto it = experts_.find(base);
  if (it != experts_.end() && it->second[static_cast<size_t>(expert)].data != nullptr) {
    return it->second[static_cast<size_t>(expert)];
  }
  const std::string b(base);
  const std::string hf = HfNameForCanonical(config_.arch, b, expert);
  return absl::NotFoundError(absl::StrCat(dir_, ": missing tensor '", b, "' expert ", expert,
                                          hf.empty() ? "" : absl::StrCat(" (HF name '", hf, "')")));
}

}  // namespace tandem
