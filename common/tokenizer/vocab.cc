#include "common/tokenizer/vocab.h"

#include <cstdio>

namespace tandem::tok {

void Vocab::Set(int32_t id, std::string piece, TokenKind kind, bool in_model) {
  if (id >= size()) {
    pieces_.resize(id + 1);
    kinds_.resize(id + 1, TokenKind::kUnused);
    in_model_.resize(id + 1, false);
  }
  if (!piece.empty()) index_.try_emplace(piece, id);
  in_model_[id] = in_model;
  pieces_[id] = std::move(piece);
  kinds_[id] = kind;
}

std::vector<int32_t> Vocab::ByteTokenIds() const {
  std::vector<int32_t> ids(256, -1);
  char buf[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    ids[b] = FindOr(buf);
  }
  return ids;
}

std::optional<uint8_t> ParseByteToken(std::string_view p) {
  if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>')
    return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(p[3]), lo = hex(p[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

}  // namespace tandem::tok
