// GPT-2's reversible byte <-> unicode map used by byte-level BPE: every byte
// becomes one printable character ('!'..'~', '¡'..'¬', '®'..'ÿ' map to
// themselves, the other 68 bytes to U+0100..U+0143; space becomes 'Ġ').
#ifndef TANDEM_COMMON_TOKENIZER_BYTE_LEVEL_H_
#define TANDEM_COMMON_TOKENIZER_BYTE_LEVEL_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::tok {

// UTF-8 of the character that byte `b` maps to.
std::string_view ByteToUnicode(uint8_t b);

// Maps every byte of `bytes` to its character.
std::string BytesToUnicode(std::string_view bytes);

// Inverse map. Appends the bytes of `token` and returns true when every
// character of it is in the map; otherwise appends nothing and returns false
// (HF's ByteLevel decoder then keeps the token's own UTF-8 bytes).
bool UnicodeToBytes(std::string_view token, std::string* out);

}  // namespace tandem::tok

#endif  // TANDEM_COMMON_TOKENIZER_BYTE_LEVEL_H_
