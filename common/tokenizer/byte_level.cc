#include "common/tokenizer/byte_level.h"

#include <array>

#include "common/tokenizer/unicode.h"

namespace tandem::tok {
namespace {

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> to_byte;  // code point -> byte, -1 if unmapped

  Tables() {
    to_byte.fill(-1);
    std::array<char32_t, 256> cps{};
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b)
      cps[b] = direct[b] ? static_cast<char32_t>(b) : next++;
    for (int b = 0; b < 256; ++b) {
      AppendCodepoint(cps[b], &to_unicode[b]);
      to_byte[cps[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

}  // namespace

std::string_view ByteToUnicode(uint8_t b) { return GetTables().to_unicode[b]; }

std::string BytesToUnicode(std::string_view bytes) {
  const Tables& t = GetTables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_unicode[static_cast<uint8_t>(c)];
  return out;
}

bool UnicodeToBytes(std::string_view token, std::string* out) {
  const Tables& t = GetTables();
  const size_t mark = out->size();
  size_t i = 0;
  while (i < token.size()) {
    const Utf8Step st = Utf8At(token, i);
    if (st.kind != Utf8Step::kValid || st.cp >= t.to_byte.size() ||
        t.to_byte[st.cp] < 0) {
      out->resize(mark);
      return false;
    }
    out->push_back(static_cast<char>(t.to_byte[st.cp]));
    i += st.len;
  }
  return true;
}

}  // namespace tandem::tok
