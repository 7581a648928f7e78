// Tokenizer::FromHfFiles / FromHfJson: HF tokenizer.json (+
// tokenizer_config.json).
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/json_util.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_parts.h"

namespace tandem {
namespace {

using nlohmann::json;
using tok::TokenKind;

// DOM parser that remembers where and why parsing failed (no exceptions).
class ErrorRecordingParser
    : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  explicit ErrorRecordingParser(json& root)
      : nlohmann::detail::json_sax_dom_parser<json>(
            root, /*allow_exceptions=*/false) {}
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const Exception& ex) {
    error = absl::StrCat("at byte ", position, ": ", ex.what());
    return false;
  }
  std::string error;
};

absl::StatusOr<json> ParseJson(std::string_view text, const std::string& what) {
  json root;
  ErrorRecordingParser sax(root);
  const bool ok = json::sax_parse(text.begin(), text.end(), &sax);
  if (!ok || !sax.error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is not valid JSON ", sax.error));
  }
  return root;
}

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("cannot open ", what, " '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad())
    return absl::DataLossError(
        absl::StrCat("error reading ", what, " '", path, "'"));
  return ss.str();
}

absl::Status LoadVocab(const json& model, tok::Vocab* vocab) {
  auto it = model.find("vocab");
  if (it == model.end() || !it->is_object()) {
    return absl::InvalidArgumentError(
        "tokenizer.json model.vocab must be an object");
  }
  vocab->Reserve(it->size() + 512);
  for (auto e = it->begin(); e != it->end(); ++e) {
    if (!e.value().is_number_integer() || e.value().get<int64_t>() < 0 ||
        e.value().get<int64_t>() >= (1 << 24)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json model.vocab['", e.key(), "'] is not a valid id"));
    }
    const int32_t id = e.value().get<int32_t>();
    if (vocab->Contains(id) && !vocab->Piece(id).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer.json model.vocab gives id ", id, " to two pieces"));
    }
    const TokenKind kind =
        tok::ParseByteToken(e.key()) ? TokenKind::kByte : TokenKind::kNormal;
    vocab->Set(id, e.key(), kind, /*in_model=*/true);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LoadMerges(
    const json& model) {
  std::vector<std::pair<std::string, std::string>> merges;
  auto it = model.find("merges");
  if (it == model.end() || it->is_null()) return merges;
  if (!it->is_array())
    return absl::InvalidArgumentError(
        "tokenizer.json model.merges must be an array");
  merges.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("merge #", i, " '", s, "' is not \"a b\""));
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("merge #", i, " is neither \"a b\" nor [\"a\", \"b\"]"));
    }
  }
  return merges;
}

absl::Status LoadAddedTokens(const json& root, tok::TokenizerParts* p) {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array())
    return absl::InvalidArgumentError(
        "tokenizer.json added_tokens must be an array");
  for (const json& t : *it) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= (1 << 24) ||
        !t.contains("content") || !t["content"].is_string()) {
      return absl::InvalidArgumentError(
          "tokenizer.json added_tokens entries need an integer \"id\" and a "
          "string \"content\"");
    }
    tok::AddedToken a;
    a.id = t["id"].get<int32_t>();
    a.content = t["content"].get<std::string>();
    a.special = tok::JsonBool(t, "special", false);
    a.lstrip = tok::JsonBool(t, "lstrip", false);
    a.rstrip = tok::JsonBool(t, "rstrip", false);
    a.single_word = tok::JsonBool(t, "single_word", false);
    a.normalized = tok::JsonBool(t, "normalized", !a.special);
    const bool in_model = p->vocab->Contains(a.id) && p->vocab->InModel(a.id) &&
                          p->vocab->Piece(a.id) == a.content;
    p->vocab->Set(a.id, a.content,
                  a.special ? TokenKind::kSpecial : TokenKind::kUserDefined,
                  in_model);
    p->added_tokens.push_back(std::move(a));
  }
  return absl::OkStatus();
}

absl::Status LoadPostProcessor(const json& j, tok::TokenizerParts* p) {
  if (j.is_null()) return absl::OkStatus();
  const auto type = tok::JsonString(j, "type");
  if (!type)
    return absl::InvalidArgumentError("post_processor needs a string \"type\"");
  if (*type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          "Sequence post_processor needs a \"processors\" array");
    }
    for (const json& sub : *it)
      TANDEM_RETURN_IF_ERROR(LoadPostProcessor(sub, p));
    return absl::OkStatus();
  }
  if (*type == "ByteLevel") return absl::OkStatus();
  if (*type == "TemplateProcessing") {
    auto single = j.find("single");
    auto specials = j.find("special_tokens");
    if (single == j.end() || !single->is_array() || specials == j.end() ||
        !specials->is_object()) {
      return absl::InvalidArgumentError(
          "TemplateProcessing needs \"single\" and \"special_tokens\"");
    }
    bool seen_sequence = false;
    for (const json& item : *single) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const json* st =
          item.contains("SpecialToken") ? &item["SpecialToken"] : nullptr;
      const auto name = st ? tok::JsonString(*st, "id") : std::nullopt;
      if (!name || !specials->contains(*name) ||
          !(*specials)[*name].contains("ids") ||
          !(*specials)[*name]["ids"].is_array()) {
        return absl::InvalidArgumentError(
            "TemplateProcessing names an unknown special token");
      }
      for (const json& id : (*specials)[*name]["ids"]) {
        if (!id.is_number_integer()) {
          return absl::InvalidArgumentError(
              "TemplateProcessing special token ids must be integers");
        }
        (seen_sequence ? p->suffix_ids : p->prefix_ids)
            .push_back(id.get<int32_t>());
      }
    }
    return absl::OkStatus();
  }
  if (*type == "RobertaProcessing" || *type == "BertProcessing") {
    auto id_of = [&](const char* key) -> int32_t {
      auto it = j.find(key);
      return it != j.end() && it->is_array() && it->size() == 2 &&
                     (*it)[1].is_number_integer()
                 ? (*it)[1].get<int32_t>()
                 : -1;
    };
    const int32_t cls = id_of("cls"), sep = id_of("sep");
    if (cls < 0 || sep < 0)
      return absl::InvalidArgumentError(
          absl::StrCat(*type, " needs cls and sep"));
    p->prefix_ids.push_back(cls);
    p->suffix_ids.push_back(sep);
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("post_processor type '", *type, "' is not supported"));
}

absl::Status ApplyConfig(const json& cfg, tok::TokenizerParts* p) {
  const tok::Vocab& v = *p->vocab;
  auto token_id = [&](const char* key, int32_t* id) -> absl::Status {
    auto content = tok::JsonTokenContent(cfg, key);
    if (!content) return absl::OkStatus();
    auto found = v.Find(*content);
    if (!found) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json ",
                                                     key, " '", *content,
                                                     "' is not in the vocab"));
    }
    *id = *found;
    return absl::OkStatus();
  };
  if (cfg.contains("bos_token") && cfg["bos_token"].is_null()) p->bos_id = -1;
  TANDEM_RETURN_IF_ERROR(token_id("bos_token", &p->bos_id));
  int32_t eos = p->eos_ids.empty() ? -1 : p->eos_ids[0];
  TANDEM_RETURN_IF_ERROR(token_id("eos_token", &eos));
  if (eos >= 0) p->eos_ids = {eos};

  auto set_flag = [](const json& cfg, const char* key, int32_t id, bool front,
                     std::vector<int32_t>* ids) {
    if (!cfg.contains(key) || !cfg[key].is_boolean() || id < 0) return;
    std::erase(*ids, id);
    if (cfg[key].get<bool>())
      ids->insert(front ? ids->begin() : ids->end(), id);
  };
  set_flag(cfg, "add_bos_token", p->bos_id, /*front=*/true, &p->prefix_ids);
  set_flag(cfg, "add_eos_token", eos, /*front=*/false, &p->suffix_ids);

  auto ct = cfg.find("chat_template");
  if (ct != cfg.end()) {
    if (ct->is_string()) {
      p->chat_template = ct->get<std::string>();
    } else if (ct->is_array()) {  // [{"name": ..., "template": ...}]
      for (const json& e : *ct) {
        auto name = tok::JsonString(e, "name");
        auto tmpl = tok::JsonString(e, "template");
        if (tmpl && (p->chat_template.empty() || name == "default"))
          p->chat_template = *tmpl;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfFiles(
    const std::string& tokenizer_json, const std::string& tokenizer_config) {
  TANDEM_ASSIGN_OR_RETURN(std::string json_text,
                          ReadFile(tokenizer_json, "tokenizer.json"));
  std::string config_text;
  if (!tokenizer_config.empty()) {
    TANDEM_ASSIGN_OR_RETURN(
        config_text, ReadFile(tokenizer_config, "tokenizer_config.json"));
  }
  auto t = FromHfJson(json_text, config_text);
  if (!t.ok()) {
    return absl::Status(t.status().code(), absl::StrCat(tokenizer_json, ": ",
                                                        t.status().message()));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromHfJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config) {
  TANDEM_ASSIGN_OR_RETURN(json root,
                          ParseJson(tokenizer_json, "tokenizer.json"));
  if (!root.is_object())
    return absl::InvalidArgumentError("tokenizer.json is not a JSON object");
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object()) {
    return absl::InvalidArgumentError("tokenizer.json has no \"model\" object");
  }
  const json& model = *mit;
  std::string type = tok::JsonString(model, "type")
                         .value_or(model.contains("merges") ? "BPE" : "");
  if (type != "BPE") {
    return absl::UnimplementedError(absl::StrCat(
        "tokenizer.json model type '", type, "' is not supported (only BPE)"));
  }

  auto p = std::make_unique<tok::TokenizerParts>();
  p->vocab = std::make_unique<tok::Vocab>();
  TANDEM_RETURN_IF_ERROR(LoadVocab(model, p->vocab.get()));
  TANDEM_RETURN_IF_ERROR(LoadAddedTokens(root, p.get()));
  TANDEM_ASSIGN_OR_RETURN(auto merges, LoadMerges(model));

  tok::BpeOptions opt;
  opt.byte_fallback = tok::JsonBool(model, "byte_fallback", false);
  opt.fuse_unk = tok::JsonBool(model, "fuse_unk", false);
  opt.ignore_merges = tok::JsonBool(model, "ignore_merges", false);
  opt.continuing_subword_prefix =
      tok::JsonString(model, "continuing_subword_prefix").value_or("");
  opt.end_of_word_suffix =
      tok::JsonString(model, "end_of_word_suffix").value_or("");
  if (auto unk = tok::JsonString(model, "unk_token")) {
    auto id = p->vocab->Find(*unk);
    if (!id)
      return absl::InvalidArgumentError(
          absl::StrCat("unk_token '", *unk, "' is not in the vocab"));
    opt.unk_id = *id;
  }
  TANDEM_ASSIGN_OR_RETURN(
      p->model, tok::BpeModel::CreateRanked(p->vocab.get(), merges, opt,
                                            /*skip_bad_merges=*/false));

  static const json kNull;
  auto get = [&](const char* key) -> const json& {
    auto it = root.find(key);
    return it == root.end() ? kNull : *it;
  };
  TANDEM_ASSIGN_OR_RETURN(p->normalizer,
                          tok::Normalizer::FromJson(get("normalizer")));
  TANDEM_ASSIGN_OR_RETURN(p->pretokenizer,
                          tok::PreTokenizer::FromJson(get("pre_tokenizer")));
  TANDEM_ASSIGN_OR_RETURN(p->decoder_config,
                          tok::DecoderConfig::FromJson(get("decoder")));
  TANDEM_RETURN_IF_ERROR(LoadPostProcessor(get("post_processor"), p.get()));
  if (!p->prefix_ids.empty()) p->bos_id = p->prefix_ids.front();

  if (!tokenizer_config.empty()) {
    TANDEM_ASSIGN_OR_RETURN(
        json cfg, ParseJson(tokenizer_config, "tokenizer_config.json"));
    if (!cfg.is_object()) {
      return absl::InvalidArgumentError(
          "tokenizer_config.json is not a JSON object");
    }
    TANDEM_RETURN_IF_ERROR(ApplyConfig(cfg, p.get()));
  }
  for (const tok::AddedToken& a : p->added_tokens) {
    if (a.special && tok::IsEndOfGenerationName(a.content) &&
        std::find(p->eos_ids.begin(), p->eos_ids.end(), a.id) ==
            p->eos_ids.end()) {
      p->eos_ids.push_back(a.id);
    }
  }
  return FromParts(std::move(p));
}

}  // namespace tandem
