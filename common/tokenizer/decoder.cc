#include "common/tokenizer/decoder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/tokenizer/byte_level.h"
#include "common/tokenizer/json_util.h"

namespace tandem::tok {
namespace {

constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581

absl::Status AddDecoder(const nlohmann::json& j, bool* fused,
                        DecoderConfig* c) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(
        "decoder must be an object with a string \"type\"");
  }
  const std::string& type = j["type"].get_ref<const std::string&>();
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(
          "Sequence decoder needs a \"decoders\" array");
    }
    for (const auto& sub : *it)
      TANDEM_RETURN_IF_ERROR(AddDecoder(sub, fused, c));
  } else if (type == "ByteLevel") {
    c->byte_level = true;
  } else if (type == "ByteFallback") {
    c->byte_fallback = true;
  } else if (type == "Fuse") {
    *fused = true;
  } else if (type == "Replace") {
    auto content = JsonString(j, "content");
    auto pattern = j.contains("pattern") ? JsonString(j["pattern"], "String")
                                         : std::nullopt;
    if (!content || !pattern || pattern->empty()) {
      return absl::UnimplementedError(
          "Replace decoder is supported with a non-empty string pattern only");
    }
    c->replacements.emplace_back(*pattern, *content);
  } else if (type == "Strip") {
    const auto content = JsonString(j, "content").value_or(" ");
    const int start = j.contains("start") && j["start"].is_number_integer()
                          ? j["start"].get<int>()
                          : 0;
    const int stop = j.contains("stop") && j["stop"].is_number_integer()
                         ? j["stop"].get<int>()
                         : 0;
    if (content != " " || stop != 0 || start < 0) {
      return absl::UnimplementedError(
          "Strip decoder is supported for leading spaces only");
    }
    if (!*fused && start > 0) {
      return absl::UnimplementedError(
          "Strip decoder is supported after Fuse only");
    }
    c->strip_leading += start;
  } else if (type == "Metaspace") {
    const std::string rep = JsonString(j, "replacement").value_or(kMetaspace);
    c->replacements.emplace_back(rep, " ");
    bool prefix = JsonBool(j, "add_prefix_space", true);
    if (auto scheme = JsonString(j, "prepend_scheme"))
      prefix = *scheme != "never";
    if (prefix) c->strip_leading += 1;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("decoder type '", type, "' is not supported"));
  }
  return absl::OkStatus();
}

void ReplaceAll(const std::string& from, const std::string& to,
                std::string* text) {
  size_t pos = 0;
  while ((pos = text->find(from, pos)) != std::string::npos) {
    text->replace(pos, from.size(), to);
    pos += to.size();
  }
}

}  // namespace

absl::StatusOr<DecoderConfig> DecoderConfig::FromJson(const nlohmann::json& j) {
  DecoderConfig c;
  if (j.is_null()) {
    c.join_with_space = true;
    return c;
  }
  bool fused = false;
  TANDEM_RETURN_IF_ERROR(AddDecoder(j, &fused, &c));
  return c;
}

PieceDecoder::PieceDecoder(const Vocab& vocab, DecoderConfig config)
    : config_(std::move(config)) {
  offsets_.reserve(vocab.size() + 1);
  offsets_.push_back(0);
  std::string tmp;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& piece = vocab.Piece(id);
    bool done = false;
    if (config_.byte_fallback) {
      if (auto b = ParseByteToken(piece)) {
        bytes_.push_back(static_cast<char>(*b));
        done = true;
      }
    }
    if (!done) {
      tmp = piece;
      for (const auto& [from, to] : config_.replacements)
        ReplaceAll(from, to, &tmp);
      if (!config_.byte_level || !UnicodeToBytes(tmp, &bytes_)) bytes_ += tmp;
    }
    offsets_.push_back(static_cast<uint32_t>(bytes_.size()));
  }
}

}  // namespace tandem::tok
