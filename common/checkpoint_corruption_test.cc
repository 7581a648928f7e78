// Every kind of malformed checkpoint gives a clear error: not OK, the
// expected code, the offending file's path and a key phrase in the message.
#include <cstring>
#include <functional>

#include "common/checkpoint.h"
#include "common/testing/checkpoint_writer.h"
#include "common/testing/tiny_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
namespace tt = tandem::testing;
using nlohmann::json;
using tt::TestTensor;

// A corruption: builds a broken checkpoint under `dir`, returns the path to
// open and sets *blame to the path the message must name.
struct Corruption {
  std::string name;
  std::function<std::string(const std::string& dir, std::string* blame)> make;
  absl::StatusCode code;
  std::vector<std::string> phrases;
};

void PrintTo(const Corruption& c, std::ostream* os) { *os << c.name; }

std::string Must(const absl::Status& s) {
  EXPECT_TRUE(s.ok()) << s;
  return "";
}

// ---- HF helpers ----

// A valid tiny qwen2 directory with its tensors; `edit` may change both.
std::string HfDir(const std::string& dir, Arch arch,
                  const std::function<void(json&, std::vector<TestTensor>&)>& edit = nullptr,
                  const tt::HfDirOptions& o = {}) {
  const ModelConfig c = tt::TinyConfig(arch);
  json config = tt::HfConfigJson(c);
  std::vector<TestTensor> ts = tt::ToHfTensors(c, tt::MakeCanonicalTensors(c, 1));
  if (edit) edit(config, ts);
  Must(tt::WriteHfDirectory(dir, config, ts, o));
  return dir;
}

// A valid qwen2 directory whose model.safetensors is replaced by `bytes`.
std::string HfWithWeights(const std::string& dir, const std::string& bytes, std::string* blame) {
  HfDir(dir, Arch::kQwen2);
  *blame = dir + "/model.safetensors";
  Must(tt::WriteFileBytes(*blame, bytes));
  return dir;
}

void Erase(std::vector<TestTensor>& ts, const std::string& name) {
  std::erase_if(ts, [&](const TestTensor& t) { return t.name == name; });
}

std::string ReadAll(const std::string& path) {
  std::string s;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

// ---- GGUF helpers ----

struct GgufParts {
  ModelConfig config;
  tt::GgufMetadata meta;
  std::vector<TestTensor> tensors;
};

GgufParts ValidGguf(Arch arch = Arch::kLlama) {
  GgufParts p;
  p.config = tt::TinyConfig(arch);
  p.meta = tt::GgufMetadataFor(p.config);
  p.tensors = tt::ToGgufTensors(p.config, tt::MakeCanonicalTensors(p.config, 1));
  return p;
}

std::string WriteGgufBytes(const std::string& dir, const std::string& bytes, std::string* blame) {
  *blame = dir + "/model.gguf";
  Must(tt::WriteFileBytes(*blame, bytes));
  return *blame;
}

std::string WriteGgufParts(const std::string& dir, const GgufParts& p, std::string* blame,
                           const tt::GgufWriteOptions& o = {}) {
  return WriteGgufBytes(dir, tt::SerializeGguf(p.meta, p.tensors, o), blame);
}

// Position right after the key string `key` in a serialized GGUF.
size_t AfterKey(const std::string& bytes, const std::string& key) {
  const size_t pos = bytes.find(key);
  EXPECT_NE(pos, std::string::npos) << key;
  return pos + key.size();
}

void Poke64(std::string* b, size_t pos, uint64_t v) { std::memcpy(&(*b)[pos], &v, 8); }
void Poke32(std::string* b, size_t pos, uint32_t v) { std::memcpy(&(*b)[pos], &v, 4); }

void SetMeta(tt::GgufMetadata& m, const std::string& key, GgufValue v) {
  for (auto& [k, val] : m) {
    if (k == key) {
      val = std::move(v);
      return;
    }
  }
  m.emplace_back(key, std::move(v));
}

const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
const absl::StatusCode kNotFound = absl::StatusCode::kNotFound;
const absl::StatusCode kUnimpl = absl::StatusCode::kUnimplemented;

std::vector<Corruption> AllCorruptions() {
  std::vector<Corruption> v;
  // ---- safetensors files ----
  v.push_back({"SafetensorsShorterThanItsLengthPrefix",
               [](const std::string& d, std::string* b) { return HfWithWeights(d, "\x10\0", b); },
               kInvalid,
               {"truncated file", "too short"}});
  v.push_back({"SafetensorsHeaderLengthPastEndOfFile",
               [](const std::string& d, std::string* b) {
                 std::string bytes(8, '\0');
                 Poke64(&bytes, 0, uint64_t{1} << 40);
                 return HfWithWeights(d, bytes + "{}", b);
               },
               kInvalid,
               {"header length 1099511627776 runs past the end of the file"}});
  v.push_back({"SafetensorsHeaderNotParseable",
               [](const std::string& d, std::string* b) {
                 return HfWithWeights(d, tt::SafetensorsFromParts("{\"a\": {\"dtype\": ", ""), b);
               },
               kInvalid,
               {"JSON header is not parseable"}});
  v.push_back({"SafetensorsTruncatedData",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2);
                 *b = d + "/model.safetensors";
                 const std::string all = ReadAll(*b);
                 Must(tt::WriteFileBytes(*b, all.substr(0, all.size() - 100)));
                 return d;
               },
               kInvalid,
               {"data_offsets", "out of range"}});
  v.push_back({"SafetensorsOffsetsOutOfRange",
               [](const std::string& d, std::string* b) {
                 return HfWithWeights(
                     d,
                     tt::SafetensorsFromParts(
                         R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[4096,4112]}})",
                         std::string(16, '\0')),
                     b);
               },
               kInvalid,
               {"tensor 'x'", "out of range"}});
  v.push_back(
      {"SafetensorsOverlappingTensors",
       [](const std::string& d, std::string* b) {
         return HfWithWeights(
             d,
             tt::SafetensorsFromParts(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                      R"("y":{"dtype":"BF16","shape":[4],"data_offsets":[8,16]}})",
                                      std::string(16, '\0')),
             b);
       },
       kInvalid,
       {"overlap"}});
  v.push_back(
      {"SafetensorsOffsetsDisagreeWithDTypeAndShape",
       [](const std::string& d, std::string* b) {
         return HfWithWeights(
             d,
             tt::SafetensorsFromParts(R"({"x":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})",
                                      std::string(16, '\0')),
             b);
       },
       kInvalid,
       {"tensor 'x'", "span 16 bytes but BF16 [4] needs 8"}});
  v.push_back({"SafetensorsUnsupportedDType",
               [](const std::string& d, std::string* b) {
                 return HfWithWeights(
                     d,
                     tt::SafetensorsFromParts(
                         R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", "abcd"),
                     b);
               },
               kUnimpl,
               {"tensor 'w'", "unsupported dtype 'F8_E4M3'"}});
  v.push_back({"SafetensorsHeaderIsNotAnObject",
               [](const std::string& d, std::string* b) {
                 return HfWithWeights(d, tt::SafetensorsFromParts("[1,2,3]", ""), b);
               },
               kInvalid,
               {"must be an object"}});
  // ---- config.json / directory layout ----
  v.push_back({"MissingConfigJson",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2);
                 std::remove((d + "/config.json").c_str());
                 *b = d + "/config.json";
                 return d;
               },
               kNotFound,
               {"missing config.json"}});
  v.push_back({"ConfigJsonNotParseable",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2);
                 *b = d + "/config.json";
                 Must(tt::WriteFileBytes(*b, "{\"model_type\": \"qwen2\",,}"));
                 return d;
               },
               kInvalid,
               {"not valid JSON"}});
  v.push_back({"UnsupportedArchitecture",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2, [](json& c, auto&) { c["model_type"] = "gpt_neox"; });
                 *b = d + "/config.json";
                 return d;
               },
               kUnimpl,
               {"unsupported architecture 'gpt_neox' in ",
                "supported: llama, mistral, qwen2, mixtral, qwen2_moe, qwen3_moe, olmoe"}});
  v.push_back({"ConfigValueOfTheWrongKind",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2, [](json& c, auto&) { c["num_hidden_layers"] = "two"; });
                 *b = d + "/config.json";
                 return d;
               },
               kInvalid,
               {"key 'num_hidden_layers' must be an integer, got string"}});
  v.push_back({"UnsupportedRopeScaling",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2, [](json& c, auto&) {
                   c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
                 });
                 *b = d + "/config.json";
                 return d;
               },
               kUnimpl,
               {"unsupported rope scaling type 'yarn'"}});
  v.push_back({"GenerationConfigMalformed",
               [](const std::string& d, std::string* b) {
                 tt::HfDirOptions o;
                 o.generation_config = json{{"temperature", "hot"}};
                 HfDir(d, Arch::kQwen2, nullptr, o);
                 *b = d + "/generation_config.json";
                 return d;
               },
               kInvalid,
               {"temperature", "must be a number"}});
  v.push_back({"NoSafetensorsWeights",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2);
                 std::remove((d + "/model.safetensors").c_str());
                 *b = d;
                 return d;
               },
               kNotFound,
               {"no model.safetensors or model.safetensors.index.json"}});
  v.push_back({"MissingShardFileNamedInIndex",
               [](const std::string& d, std::string* b) {
                 tt::HfDirOptions o;
                 o.num_shards = 3;
                 HfDir(d, Arch::kQwen2, nullptr, o);
                 *b = d + "/model-00002-of-00003.safetensors";
                 std::remove(b->c_str());
                 return d;
               },
               kNotFound,
               {"missing shard file named in", "model.safetensors.index.json"}});
  v.push_back({"IndexNamesATensorTheShardLacks",
               [](const std::string& d, std::string* b) {
                 tt::HfDirOptions o;
                 o.num_shards = 2;
                 HfDir(d, Arch::kQwen2, nullptr, o);
                 *b = d + "/model.safetensors.index.json";
                 auto index = json::parse(ReadAll(*b), nullptr, false);
                 index["weight_map"]["model.layers.0.ghost.weight"] =
                     "model-00001-of-00002.safetensors";
                 Must(tt::WriteFileBytes(*b, index.dump()));
                 return d;
               },
               kInvalid,
               {"model.layers.0.ghost.weight", "does not contain it"}});
  v.push_back({"IndexEscapesTheDirectory",
               [](const std::string& d, std::string* b) {
                 tt::HfDirOptions o;
                 o.num_shards = 2;
                 HfDir(d, Arch::kQwen2, nullptr, o);
                 *b = d + "/model.safetensors.index.json";
                 auto index = json::parse(ReadAll(*b), nullptr, false);
                 index["weight_map"]["lm_head.weight"] = "../../etc/passwd";
                 Must(tt::WriteFileBytes(*b, index.dump()));
                 return d;
               },
               kInvalid,
               {"unsafe path '../../etc/passwd'"}});
  // ---- tensors vs config ----
  v.push_back({"MissingTensor",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2, [](json&, std::vector<TestTensor>& ts) {
                   Erase(ts, "model.layers.1.mlp.down_proj.weight");
                 });
                 *b = d;
                 return d;
               },
               kNotFound,
               {"missing tensor 'blk.1.ffn_down.weight'", "model.layers.1.mlp.down_proj.weight"}});
  v.push_back({"MissingBiasWhenQkvBias",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2, [](json&, std::vector<TestTensor>& ts) {
                   Erase(ts, "model.layers.0.self_attn.k_proj.bias");
                 });
                 *b = d;
                 return d;
               },
               kNotFound,
               {"missing tensor 'blk.0.attn_k.bias'"}});
  v.push_back({"MissingExpert",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen3Moe, [](json&, std::vector<TestTensor>& ts) {
                   Erase(ts, "model.layers.1.mlp.experts.3.up_proj.weight");
                 });
                 *b = d;
                 return d;
               },
               kNotFound,
               {"missing tensor 'blk.1.ffn_up_exps' expert 3",
                "model.layers.1.mlp.experts.3.up_proj.weight"}});
  v.push_back({"MissingSharedExpertGate",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2Moe, [](json&, std::vector<TestTensor>& ts) {
                   Erase(ts, "model.layers.2.mlp.shared_expert_gate.weight");
                 });
                 *b = d;
                 return d;
               },
               kNotFound,
               {"blk.2.ffn_gate_inp_shexp.weight"}});
  v.push_back({"MissingLmHeadWhenNotTied",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kLlama,
                       [](json& c, std::vector<TestTensor>&) { c["tie_word_embeddings"] = false; });
                 *b = d;
                 return d;
               },
               kNotFound,
               {"missing tensor 'output.weight'", "lm_head.weight"}});
  v.push_back({"TensorShapeDisagreesWithConfig",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2, [](json& c, auto&) { c["intermediate_size"] = 128; });
                 *b = d;
                 return d;
               },
               kInvalid,
               {"tensor 'blk.0.ffn_gate.weight'", "model.layers.0.mlp.gate_proj.weight",
                "has shape [96, 64], expected [128, 64]"}});
  v.push_back({"TensorForALayerBeyondTheConfig",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2, [](json& c, auto&) { c["num_hidden_layers"] = 1; });
                 *b = d + "/model.safetensors";
                 return d;
               },
               kInvalid,
               {"is for layer 1 but the config has 1 layers"}});
  v.push_back({"DuplicateTensorAcrossShards",
               [](const std::string& d, std::string* b) {
                 HfDir(d, Arch::kQwen2);
                 // A second shard, named in the index, repeats the embedding.
                 const ModelConfig c = tt::TinyConfig(Arch::kQwen2);
                 const auto ts = tt::ToHfTensors(c, tt::MakeCanonicalTensors(c, 1));
                 const TestTensor extra = TestTensor::FromF32("x.unused", {2}, {1, 2});
                 Must(tt::WriteSafetensors(d + "/extra.safetensors", {ts[0], extra}));
                 json wm = json::object();
                 for (const auto& t : ts) wm[t.name] = "model.safetensors";
                 wm["x.unused"] = "extra.safetensors";
                 Must(tt::WriteFileBytes(d + "/model.safetensors.index.json",
                                         json{{"weight_map", wm}}.dump()));
                 *b = d;
                 return d;
               },
               kInvalid,
               {"tensor 'token_embd.weight' appears twice", "extra.safetensors"}});
  v.push_back({"FusedExpertsOfTheWrongShape",
               [](const std::string& d, std::string* b) {
                 const ModelConfig c = tt::TinyConfig(Arch::kQwen3Moe);
                 tt::HfTensorOptions o;
                 o.fused_experts = true;
                 auto ts = tt::ToHfTensors(c, tt::MakeCanonicalTensors(c, 1), o);
                 for (auto& t : ts) {
                   if (t.name == "model.layers.0.mlp.experts.down_proj") {
                     t.shape = {2, 2 * c.hidden_size, c.moe_intermediate_size};  // 2 experts, not 4
                   }
                 }
                 Must(tt::WriteHfDirectory(d, tt::HfConfigJson(c), ts));
                 *b = d + "/model.safetensors";
                 return d;
               },
               kInvalid,
               {"model.layers.0.mlp.experts.down_proj", "[2, 128, 32]"}});
  // ---- GGUF ----
  v.push_back({"GgufBadMagic",
               [](const std::string& d, std::string* b) {
                 std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 bytes[0] = 'X';
                 return WriteGgufBytes(d, bytes, b);
               },
               kInvalid,
               {"not a GGUF file", "bad magic"}});
  v.push_back({"GgufUnsupportedVersion",
               [](const std::string& d, std::string* b) {
                 const GgufParts p = ValidGguf();
                 return WriteGgufParts(d, p, b, {1, 32, {}, {}});
               },
               kUnimpl,
               {"unsupported GGUF version 1"}});
  v.push_back({"GgufTruncatedInMetadata",
               [](const std::string& d, std::string* b) {
                 const std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 return WriteGgufBytes(d, bytes.substr(0, AfterKey(bytes, "llama.vocab_size") + 2),
                                       b);
               },
               kInvalid,
               {"truncated"}});
  v.push_back({"GgufTruncatedInTensorData",
               [](const std::string& d, std::string* b) {
                 const std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 return WriteGgufBytes(d, bytes.substr(0, bytes.size() - 1000), b);
               },
               kInvalid,
               {"runs past the end of the file"}});
  v.push_back({"GgufStringLengthPastEndOfFile",
               [](const std::string& d, std::string* b) {
                 std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 Poke64(&bytes, AfterKey(bytes, "general.architecture") + 4, uint64_t{1} << 50);
                 return WriteGgufBytes(d, bytes, b);
               },
               kInvalid,
               {"string length 1125899906842624", "runs past the end of the file"}});
  v.push_back({"GgufAbsurdTensorCount",
               [](const std::string& d, std::string* b) {
                 std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 Poke64(&bytes, 8, uint64_t{1} << 60);
                 return WriteGgufBytes(d, bytes, b);
               },
               kInvalid,
               {"tensor count 1152921504606846976 cannot fit"}});
  v.push_back({"GgufAbsurdMetadataCount",
               [](const std::string& d, std::string* b) {
                 std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 Poke64(&bytes, 16, ~uint64_t{0});
                 return WriteGgufBytes(d, bytes, b);
               },
               kInvalid,
               {"metadata count", "cannot fit"}});
  v.push_back({"GgufAbsurdArrayLength",
               [](const std::string& d, std::string* b) {
                 std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 Poke64(&bytes, AfterKey(bytes, "tokenizer.ggml.tokens") + 8, uint64_t{1} << 58);
                 return WriteGgufBytes(d, bytes, b);
               },
               kInvalid,
               {"'tokenizer.ggml.tokens'", "cannot fit"}});
  v.push_back({"GgufUnknownValueType",
               [](const std::string& d, std::string* b) {
                 std::string bytes = tt::SerializeGguf(ValidGguf().meta, ValidGguf().tensors);
                 Poke32(&bytes, AfterKey(bytes, "general.name"), 99);
                 return WriteGgufBytes(d, bytes, b);
               },
               kInvalid,
               {"'general.name' has unknown value type 99"}});
  v.push_back({"GgufUnsupportedTensorType",
               [](const std::string& d, std::string* b) {
                 tt::GgufWriteOptions o;
                 o.type_overrides["blk.1.attn_v.weight"] = 16;
                 return WriteGgufParts(d, ValidGguf(), b, o);
               },
               kUnimpl,
               {"tensor 'blk.1.attn_v.weight' has unsupported ggml type id 16 (IQ2_XXS)"}});
  v.push_back({"GgufOverlappingTensors",
               [](const std::string& d, std::string* b) {
                 tt::GgufWriteOptions o;
                 o.offset_overrides["blk.0.attn_k.weight"] = 0;
                 return WriteGgufParts(d, ValidGguf(), b, o);
               },
               kInvalid,
               {"overlap", "blk.0.attn_k.weight"}});
  v.push_back({"GgufMisalignedTensorOffset",
               [](const std::string& d, std::string* b) {
                 tt::GgufWriteOptions o;
                 o.offset_overrides["output_norm.weight"] = 33;
                 return WriteGgufParts(d, ValidGguf(), b, o);
               },
               kInvalid,
               {"tensor 'output_norm.weight' has offset 33", "alignment 32"}});
  v.push_back({"GgufUnsupportedArchitecture",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 SetMeta(p.meta, "general.architecture", tt::GgufString("gemma"));
                 return WriteGgufParts(d, p, b);
               },
               kUnimpl,
               {"unsupported architecture 'gemma' in "}});
  v.push_back({"GgufMissingRequiredKey",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 std::erase_if(p.meta,
                               [](const auto& kv) { return kv.first == "llama.block_count"; });
                 return WriteGgufParts(d, p, b);
               },
               kInvalid,
               {"required metadata key 'llama.block_count' is missing"}});
  v.push_back({"GgufMetadataOfTheWrongType",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 SetMeta(p.meta, "llama.embedding_length", tt::GgufString("64"));
                 return WriteGgufParts(d, p, b);
               },
               kInvalid,
               {"'llama.embedding_length' has type STRING, expected an integer"}});
  v.push_back({"GgufTensorShapeDisagreesWithMetadata",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 SetMeta(p.meta, "llama.feed_forward_length", tt::GgufUint32(128));
                 return WriteGgufParts(d, p, b);
               },
               kInvalid,
               {"tensor 'blk.0.ffn_gate.weight' has shape [96, 64], expected [128, 64]"}});
  v.push_back({"GgufMissingTensor",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 Erase(p.tensors, "blk.1.attn_v.weight");
                 return WriteGgufParts(d, p, b);
               },
               kNotFound,
               {"missing tensor 'blk.1.attn_v.weight'"}});
  v.push_back({"GgufExpertStackOfTheWrongSize",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf(Arch::kQwen3Moe);
                 SetMeta(p.meta, "qwen3moe.expert_count", tt::GgufUint32(3));
                 return WriteGgufParts(d, p, b);
               },
               kInvalid,
               {"ffn_", "_exps.weight' has shape [4, ", "expected [3, rows, cols]"}});
  v.push_back({"GgufQuantizedNorm",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 for (auto& t : p.tensors) {
                   if (t.name == "blk.0.attn_norm.weight") {
                     t = TestTensor::FromF32(t.name, t.shape, t.ToF32(), DType::kQ8_0);
                   }
                 }
                 return WriteGgufParts(d, p, b);
               },
               kInvalid,
               {"tensor 'blk.0.attn_norm.weight' is 1-D but stored as Q8_0"}});
  v.push_back({"GgufBadAlignmentValue",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 SetMeta(p.meta, "general.alignment", tt::GgufUint32(48));
                 return WriteGgufParts(d, p, b);
               },
               kInvalid,
               {"general.alignment must be a power of two"}});
  v.push_back({"GgufInconsistentHeads",
               [](const std::string& d, std::string* b) {
                 GgufParts p = ValidGguf();
                 SetMeta(p.meta, "llama.attention.head_count_kv", tt::GgufUint32(3));
                 return WriteGgufParts(d, p, b);
               },
               kInvalid,
               {"invalid model metadata", "num_kv_heads"}});
  return v;
}

class Corrupt : public ::testing::TestWithParam<Corruption> {
 protected:
  void SetUp() override { dir_ = tt::MakeTempDir("corrupt"); }
  void TearDown() override { tt::RemoveTree(dir_); }
  std::string dir_;
};

TEST_P(Corrupt, OpenFailsWithAClearError) {
  const Corruption& c = GetParam();
  std::string blame;
  const std::string path = c.make(dir_, &blame);
  ASSERT_FALSE(blame.empty());
  auto ck = Checkpoint::Open(path);
  ASSERT_FALSE(ck.ok()) << c.name << " opened";
  EXPECT_EQ(ck.status().code(), c.code) << ck.status();
  EXPECT_THAT(std::string(ck.status().message()), HasSubstr(blame));
  for (const std::string& phrase : c.phrases) {
    EXPECT_THAT(std::string(ck.status().message()), HasSubstr(phrase));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, Corrupt, ::testing::ValuesIn(AllCorruptions()),
                         [](const auto& info) { return info.param.name; });

// The unmodified builders above produce valid checkpoints, so each case
// fails because of its corruption alone.
TEST(CorruptBaseline, UnmodifiedCheckpointsOpen) {
  const std::string dir = tt::MakeTempDir("corrupt_baseline");
  for (Arch a : {Arch::kQwen2, Arch::kQwen3Moe, Arch::kQwen2Moe, Arch::kLlama}) {
    const std::string d = dir + "/" + std::string(ArchName(a));
    HfDir(d, a);
    auto ck = Checkpoint::Open(d);
    EXPECT_TRUE(ck.ok()) << ck.status();
  }
  tt::HfDirOptions o;
  o.num_shards = 3;
  HfDir(dir + "/sharded", Arch::kQwen2, nullptr, o);
  EXPECT_TRUE(Checkpoint::Open(dir + "/sharded").ok());
  for (Arch a : {Arch::kLlama, Arch::kQwen3Moe}) {
    std::string blame;
    const std::string p = WriteGgufParts(dir, ValidGguf(a), &blame);
    auto ck = Checkpoint::Open(p);
    EXPECT_TRUE(ck.ok()) << ck.status();
  }
  tt::RemoveTree(dir);
}

}  // namespace
}  // namespace tandem
