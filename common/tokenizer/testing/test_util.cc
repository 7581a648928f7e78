#include "common/tokenizer/testing/test_util.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/tokenizer/vocab.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::testing {

using nlohmann::json;

std::string TokenizerTestData(const std::string& rel) {
  return absl::StrCat(TANDEM_TESTDATA_DIR, "/tokenizers/", rel);
}

std::string Qwen3Dir() { return TANDEM_QWEN3_TOKENIZER_DIR; }

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/tandem_tok_", getpid(), "_",
                      name);
}

namespace {
const Tokenizer& LoadOrDie(const std::string& json_path,
                           const std::string& cfg_path) {
  auto t = Tokenizer::FromHfFiles(json_path, cfg_path);
  if (!t.ok()) {
    std::fprintf(stderr, "cannot load %s: %s\n", json_path.c_str(),
                 std::string(t.status().message()).c_str());
    std::abort();
  }
  return *t.value().release();
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(path, " is not JSON"));
  return j;
}
}  // namespace

const Tokenizer& Llama2() {
  static const Tokenizer& t =
      LoadOrDie(TokenizerTestData("llama2/tokenizer.json"),
                TokenizerTestData("llama2/tokenizer_config.json"));
  return t;
}

const Tokenizer& Qwen3() {
  static const Tokenizer& t = LoadOrDie(Qwen3Dir() + "/tokenizer.json",
                                        Qwen3Dir() + "/tokenizer_config.json");
  return t;
}

absl::StatusOr<Goldens> LoadGoldens(const std::string& file) {
  auto j = ReadJson(TokenizerTestData(file));
  if (!j.ok()) return j.status();
  Goldens g;
  g.versions = (*j)["versions"].dump();
  for (const json& c : (*j)["cases"]) {
    GoldenCase gc;
    gc.text = c["text"].get<std::string>();
    gc.ids = c["ids"].get<std::vector<int32_t>>();
    gc.ids_no_add = c["ids_no_add"].get<std::vector<int32_t>>();
    gc.ids_plain = c["ids_plain"].get<std::vector<int32_t>>();
    gc.decoded = c["decoded"].get<std::string>();
    gc.decoded_skip_special = c["decoded_skip_special"].get<std::string>();
    gc.roundtrip = c["roundtrip"].get<bool>();
    g.cases.push_back(std::move(gc));
  }
  if (g.cases.empty())
    return absl::InvalidArgumentError(absl::StrCat(file, " has no cases"));
  return g;
}

bool IsStrictUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(
    const GgufTestWriter& w, const std::string& name) {
  const std::string path = TempPath(name + ".gguf");
  if (auto s = w.WriteTo(path); !s.ok()) return s;
  auto g = GgufFile::Open(path);
  if (!g.ok()) return g.status();
  auto t = Tokenizer::FromGguf(**g);
  std::remove(path.c_str());
  return t;
}

absl::StatusOr<GgufTestWriter> GgufFromTokenizerJson(const std::string& path,
                                                     const std::string& model,
                                                     const std::string& pre) {
  auto j = ReadJson(path);
  if (!j.ok()) return j.status();
  const json& m = (*j)["model"];
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto put = [&](size_t id, const std::string& piece, int32_t type) {
    if (id >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, 1);
    }
    tokens[id] = piece;
    types[id] = type;
  };
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    const bool byte = tok::ParseByteToken(it.key()).has_value();
    put(it.value().get<size_t>(), it.key(), model == "llama" && byte ? 6 : 1);
  }
  int32_t eos = -1;
  for (const json& a : (*j)["added_tokens"]) {
    const std::string content = a["content"].get<std::string>();
    int32_t type = a["special"].get<bool>() ? 3 : 4;
    if (content == "<unk>") type = 2;
    put(a["id"].get<size_t>(), content, type);
    if (content == "<|im_end|>" || content == "</s>")
      eos = a["id"].get<int32_t>();
  }
  GgufTestWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("tokenizer.ggml.model", model);
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  if (model == "gpt2") {
    std::vector<std::string> merges;
    for (const json& mg : m["merges"]) {
      merges.push_back(mg.is_string() ? mg.get<std::string>()
                                      : mg[0].get<std::string>() + " " +
                                            mg[1].get<std::string>());
    }
    w.AddStringArray("tokenizer.ggml.merges", merges);
    w.AddString("tokenizer.ggml.pre", pre);
    w.AddBool("tokenizer.ggml.add_bos_token", false);
  } else {
    // SentencePiece scores consistent with the merge ranks: a piece scores
    // -(rank of the first merge producing it); pieces no merge produces
    // score lowest.
    std::vector<float> scores(tokens.size(), -1e9f);
    const json& vocab = m["vocab"];
    const json& merges = m["merges"];
    for (size_t r = merges.size(); r-- > 0;) {
      const json& mg = merges[r];
      std::string joined;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        const size_t sp = s.find(' ', 1);
        joined = s.substr(0, sp) + s.substr(sp + 1);
      } else {
        joined = mg[0].get<std::string>() + mg[1].get<std::string>();
      }
      auto it = vocab.find(joined);
      if (it != vocab.end()) scores[it->get<size_t>()] = -static_cast<float>(r);
    }
    w.AddFloat32Array("tokenizer.ggml.scores", scores);
    w.AddUint32("tokenizer.ggml.bos_token_id", 1);
    w.AddUint32("tokenizer.ggml.unknown_token_id", 0);
    w.AddBool("tokenizer.ggml.add_bos_token", true);
  }
  if (eos >= 0)
    w.AddUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
  return w;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace tandem::testing
