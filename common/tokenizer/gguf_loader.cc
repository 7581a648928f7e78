// Tokenizer::FromGguf: the tokenizer.ggml.* metadata of a GGUF file, read the
// way llama.cpp reads it (src/llama-vocab.cpp).
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/gguf.h"
#include "common/status_macros.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_parts.h"

namespace tandem {
namespace {

using tok::TokenKind;

constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581

// llama.cpp's llama_token_type.
enum GgufTokenType {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

absl::StatusOr<const GgufValue*> FindArray(const GgufFile& g, const char* key,
                                           GgufType elem, bool required) {
  const GgufValue* v = g.Find(key);
  if (v == nullptr) {
    if (required) return absl::NotFoundError(absl::StrCat("GGUF has no ", key));
    return nullptr;
  }
  const bool elem_ok =
      elem == GgufType::kString    ? v->elem_type == GgufType::kString
      : elem == GgufType::kFloat32 ? (v->elem_type == GgufType::kFloat32 ||
                                      v->elem_type == GgufType::kFloat64)
                                   : (v->elem_type != GgufType::kString &&
                                      v->elem_type != GgufType::kFloat32 &&
                                      v->elem_type != GgufType::kFloat64 &&
                                      v->elem_type != GgufType::kArray);
  if (!v->is_array() || !elem_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF ", key, " has the wrong type"));
  }
  return v;
}

// Integer scalar, or `dflt` when absent.
absl::StatusOr<int64_t> GetInt(const GgufFile& g, const char* key,
                               int64_t dflt) {
  const GgufValue* v = g.Find(key);
  if (v == nullptr) return dflt;
  if (!v->is_integer())
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF ", key, " is not an integer"));
  return v->i;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(
    const GgufFile& g) {
  const GgufValue* mv = g.Find("tokenizer.ggml.model");
  if (mv == nullptr || mv->type != GgufType::kString) {
    return absl::NotFoundError("GGUF has no tokenizer.ggml.model string");
  }
  const std::string model = mv->s;
  const bool spm = model == "llama";
  if (!spm && model != "gpt2") {
    return absl::UnimplementedError(
        absl::StrCat("GGUF tokenizer model '", model,
                     "' is not supported (only gpt2 and llama)"));
  }
  TANDEM_ASSIGN_OR_RETURN(
      const GgufValue* tokens,
      FindArray(g, "tokenizer.ggml.tokens", GgufType::kString, true));
  TANDEM_ASSIGN_OR_RETURN(
      const GgufValue* types,
      FindArray(g, "tokenizer.ggml.token_type", GgufType::kInt32, false));
  TANDEM_ASSIGN_OR_RETURN(
      const GgufValue* scores,
      FindArray(g, "tokenizer.ggml.scores", GgufType::kFloat32, false));
  TANDEM_ASSIGN_OR_RETURN(
      const GgufValue* merges,
      FindArray(g, "tokenizer.ggml.merges", GgufType::kString, !spm));
  const size_t n = tokens->strings.size();
  if (n == 0 || n >= (1u << 24))
    return absl::InvalidArgumentError("GGUF token list is empty or too long");
  if (types != nullptr && types->ints.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GGUF has ", types->ints.size(), " token types for ", n, " tokens"));
  }
  if (scores != nullptr && scores->floats.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("GGUF has ", scores->floats.size(), " token scores for ",
                     n, " tokens"));
  }

  auto p = std::make_unique<tok::TokenizerParts>();
  p->vocab = std::make_unique<tok::Vocab>();
  p->vocab->Reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t ty = types != nullptr ? types->ints[i] : int64_t{kNormal};
    TokenKind kind = TokenKind::kNormal;
    switch (ty) {
      case kUnknown:
        kind = TokenKind::kSpecial;
        break;  // <unk> parses like a control token
      case kControl:
        kind = TokenKind::kSpecial;
        break;
      case kUserDefined:
        kind = TokenKind::kUserDefined;
        break;
      case kUnused:
        kind = TokenKind::kUnused;
        break;
      case kByte:
        kind = TokenKind::kByte;
        break;
      default:
        break;
    }
    const std::string& piece = tokens->strings[i];
    const int32_t id = static_cast<int32_t>(i);
    p->vocab->Set(id, piece, kind,
                  /*in_model=*/kind != TokenKind::kSpecial &&
                      kind != TokenKind::kUserDefined);
    if ((kind == TokenKind::kSpecial || kind == TokenKind::kUserDefined) &&
        !piece.empty()) {
      tok::AddedToken a;
      a.id = id;
      a.content = piece;
      a.special = kind == TokenKind::kSpecial;
      p->added_tokens.push_back(std::move(a));
    }
  }

  const std::string pre = g.Find("tokenizer.ggml.pre") != nullptr
                              ? g.Find("tokenizer.ggml.pre")->s
                              : "";
  bool add_bos = spm, add_eos = false, ignore_merges = false, known_pre = true;
  TANDEM_ASSIGN_OR_RETURN(
      int64_t unk, GetInt(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1));
  tok::BpeOptions opt;
  opt.unk_id = unk >= 0 && unk < static_cast<int64_t>(n)
                   ? static_cast<int32_t>(unk)
                   : -1;
  if (spm) {
    const GgufValue* asp = g.Find("tokenizer.ggml.add_space_prefix");
    const bool space_prefix =
        asp == nullptr || !asp->is_integer() || asp->i != 0;
    // llama.cpp: ' ' -> '▁', plus a leading '▁' on each text fragment.
    auto norm = tok::Normalizer::Identity();
    if (space_prefix) norm->AddPrepend(kMetaspace);
    norm->AddReplace(" ", kMetaspace);
    p->normalizer = std::move(norm);
    opt.byte_fallback = true;
    std::vector<float> sc(n, 0.0f);
    if (scores != nullptr) {
      for (size_t i = 0; i < n; ++i)
        sc[i] = static_cast<float>(scores->floats[i]);
    }
    TANDEM_ASSIGN_OR_RETURN(p->model, tok::BpeModel::CreateScored(
                                          p->vocab.get(), std::move(sc), opt));
    p->decoder_config.replacements.emplace_back(kMetaspace, " ");
    p->decoder_config.byte_fallback = true;
    p->decoder_config.strip_leading = space_prefix ? 1 : 0;
  } else {
    // Byte-level BPE has no unknown token, whatever the metadata says: a
    // piece missing from the vocabulary is encoded byte by byte and a byte
    // without a token is dropped, as llama.cpp does and as the published
    // tokenizer.json files (unk_token null) do. SmolLM2's GGUF names
    // unknown_token_id 0, which is <|endoftext|>, and its vocabulary lacks
    // 21 byte tokens (0x04, 0x06, 0xF1, ...): honouring the id put an
    // end-of-text token into prompts holding those bytes.
    opt.unk_id = -1;
    const std::vector<std::string> regexes =
        tok::LlamaCppPreRegexes(pre, &ignore_merges, &known_pre);
    add_bos = ignore_merges ||
              pre == "chameleon";  // llama.cpp: llama3 and tekken add BOS
    TANDEM_ASSIGN_OR_RETURN(p->pretokenizer,
                            tok::PreTokenizer::FromRegexes(regexes, true));
    opt.ignore_merges = ignore_merges;
    std::vector<std::pair<std::string, std::string>> pairs;
    pairs.reserve(merges->strings.size());
    for (const std::string& m : merges->strings) {
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) continue;
      pairs.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
    TANDEM_ASSIGN_OR_RETURN(
        p->model, tok::BpeModel::CreateRanked(p->vocab.get(), pairs, opt,
                                              /*skip_bad_merges=*/true));
    p->decoder_config.byte_level = true;
  }

  if (const GgufValue* v = g.Find("tokenizer.ggml.add_bos_token");
      v != nullptr && v->is_integer()) {
    add_bos = v->i != 0;
  }
  if (const GgufValue* v = g.Find("tokenizer.ggml.add_eos_token");
      v != nullptr && v->is_integer()) {
    add_eos = v->i != 0;
  }
  auto valid = [n](int64_t id) {
    return id >= 0 && id < static_cast<int64_t>(n);
  };
  TANDEM_ASSIGN_OR_RETURN(
      int64_t bos, GetInt(g, "tokenizer.ggml.bos_token_id", spm ? 1 : -1));
  TANDEM_ASSIGN_OR_RETURN(
      int64_t eos, GetInt(g, "tokenizer.ggml.eos_token_id", spm ? 2 : -1));
  p->bos_id = valid(bos) ? static_cast<int32_t>(bos) : -1;
  if (valid(eos)) p->eos_ids.push_back(static_cast<int32_t>(eos));
  for (const char* key :
       {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    TANDEM_ASSIGN_OR_RETURN(int64_t id, GetInt(g, key, -1));
    if (valid(id) && std::find(p->eos_ids.begin(), p->eos_ids.end(), id) ==
                         p->eos_ids.end()) {
      p->eos_ids.push_back(static_cast<int32_t>(id));
    }
  }
  for (const tok::AddedToken& a : p->added_tokens) {
    if (tok::IsEndOfGenerationName(a.content) &&
        std::find(p->eos_ids.begin(), p->eos_ids.end(), a.id) ==
            p->eos_ids.end()) {
      p->eos_ids.push_back(a.id);
    }
  }
  if (add_bos && p->bos_id >= 0) p->prefix_ids.push_back(p->bos_id);
  if (add_eos && !p->eos_ids.empty())
    p->suffix_ids.push_back(p->eos_ids.front());
  if (const GgufValue* ct = g.Find("tokenizer.chat_template");
      ct != nullptr && ct->type == GgufType::kString) {
    p->chat_template = ct->s;
  }
  return FromParts(std::move(p));
}

}  // namespace tandem
