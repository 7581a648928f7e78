// Random text through every tokenizer the tests load (Llama-2's SentencePiece
// BPE with byte fallback, Qwen3's byte-level BPE with NFC, both also as GGUF):
// encoding then decoding gives the text back, as HF `tokenizers` does for
// these models (Llama-2: exactly; Qwen3: in NFC), every id is in range, the
// streaming detokenizer agrees with Decode, and nothing crashes or hangs on
// text made to stress the pre-tokenizer's regex (runs of spaces, digits and
// marks, contractions, scripts, emoji sequences, special-token text, control
// bytes). A fresh seed each run; TANDEM_FUZZ_SEED replays one.
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/tokenizer/testing/test_util.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::tandem::testing::Printable;

uint64_t Seed(const char* test) {
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("TANDEM_FUZZ_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::cout << test << " seed: " << seed << " (TANDEM_FUZZ_SEED to replay)" << std::endl;
  return seed;
}

// Valid UTF-8 built from pieces the tokenizers treat differently.
class TextGenerator {
 public:
  explicit TextGenerator(uint64_t seed) : rng_(seed) {}

  // `no_metaspace`: leave out U+2581, which SentencePiece decoders turn into a
  // space (HF does the same), so the round trip cannot hold with it.
  std::string Next(bool no_metaspace) {
    std::string s;
    const int pieces = Uniform(1, 24);
    for (int i = 0; i < pieces; ++i) AppendPiece(no_metaspace, &s);
    return s;
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  char32_t Range(char32_t lo, char32_t hi) {
    return static_cast<char32_t>(Uniform(static_cast<int>(lo), static_cast<int>(hi)));
  }
  void Run(char32_t cp, int n, std::string* s) {
    for (int i = 0; i < n; ++i) tok::AppendCodepoint(cp, s);
  }

  void AppendPiece(bool no_metaspace, std::string* s) {
    static const char* kWords[] = {
        "hello", "The", " world", "don't", "I'M", "we'll", "they'VE", "'s", "'t", "'re",
        "<|im_start|>", "<|im_end|>", "<s>", "</s>", "<unk>", "<|endoftext|>", "<think>",
        "```", "\r\n", "\t", "http://x.y/z?a=1&b=2", "3.14159", "1,000,000", "==>",
        "naïve", "café", "straße", "ﬁ", "Å", "Ω", "ﾊﾝｶｸ",
    };
    switch (Uniform(0, 15)) {
      case 0:  // a word or markup
        s->append(kWords[Uniform(0, std::size(kWords) - 1)]);
        break;
      case 1:  // printable ASCII
        for (int n = Uniform(1, 12); n > 0; --n) tok::AppendCodepoint(Range(0x20, 0x7E), s);
        break;
      case 2:  // runs of spaces, tabs and newlines (the regex's \s+(?!\S))
        for (int n = Uniform(1, 6); n > 0; --n) {
          static const char32_t kSpace[] = {' ', ' ', ' ', '\n', '\t', '\r', 0x3000, 0xA0, 0x2009};
          Run(kSpace[Uniform(0, std::size(kSpace) - 1)], Uniform(1, 40), s);
        }
        break;
      case 3:  // digit runs (\p{N}{1,3} and single digits)
        for (int n = Uniform(1, 30); n > 0; --n) tok::AppendCodepoint(Range('0', '9'), s);
        break;
      case 4:  // Latin letters with combining marks, NFC or not
        for (int n = Uniform(1, 6); n > 0; --n) {
          tok::AppendCodepoint(Range('a', 'z'), s);
          for (int m = Uniform(0, 3); m > 0; --m) tok::AppendCodepoint(Range(0x300, 0x36F), s);
        }
        break;
      case 5:  // Latin-1 and Latin Extended
        for (int n = Uniform(1, 8); n > 0; --n) tok::AppendCodepoint(Range(0xC0, 0x24F), s);
        break;
      case 6:  // CJK ideographs
        for (int n = Uniform(1, 10); n > 0; --n) tok::AppendCodepoint(Range(0x4E00, 0x9FFF), s);
        break;
      case 7:  // kana and Hangul (syllables and conjoining jamo)
        for (int n = Uniform(1, 8); n > 0; --n) {
          const int k = Uniform(0, 2);
          tok::AppendCodepoint(k == 0   ? Range(0x3041, 0x30FF)
                               : k == 1 ? Range(0xAC00, 0xD7A3)
                                        : Range(0x1100, 0x11FF),
                               s);
        }
        break;
      case 8:  // Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai
        for (int n = Uniform(1, 10); n > 0; --n) {
          static const char32_t kLo[] = {0x400, 0x370, 0x600, 0x5D0, 0x900, 0xE01};
          static const char32_t kHi[] = {0x4FF, 0x3FF, 0x6FF, 0x5EA, 0x97F, 0xE5B};
          const int k = Uniform(0, 5);
          tok::AppendCodepoint(Range(kLo[k], kHi[k]), s);
        }
        break;
      case 9: {  // emoji, with skin tones, variation selectors and ZWJ joins
        for (int n = Uniform(1, 4); n > 0; --n) {
          tok::AppendCodepoint(Range(0x1F300, 0x1FAFF), s);
          if (Uniform(0, 2) == 0) tok::AppendCodepoint(Range(0x1F3FB, 0x1F3FF), s);
          if (Uniform(0, 2) == 0) tok::AppendCodepoint(0xFE0F, s);
          if (Uniform(0, 2) == 0) tok::AppendCodepoint(0x200D, s);
        }
        break;
      }
      case 10:  // punctuation and symbols, ASCII and not
        for (int n = Uniform(1, 8); n > 0; --n) {
          static const char32_t kPunct[] = {'!', '"', '#', '\'', '(', ')', '.', ',', ':', '?',
                                            '`', '~', 0x2014, 0x2026, 0x201C, 0x201D, 0x3002,
                                            0xFF01, 0x00BF, 0x20AC, 0x2192, 0x221E};
          tok::AppendCodepoint(kPunct[Uniform(0, std::size(kPunct) - 1)], s);
        }
        break;
      case 11:  // control characters, NUL included
        for (int n = Uniform(1, 3); n > 0; --n) {
          const int k = Uniform(0, 2);
          tok::AppendCodepoint(k == 0 ? Range(0, 0x1F) : k == 1 ? 0x7F : Range(0x80, 0x9F), s);
        }
        break;
      case 12:  // any plane, skipping surrogates
        for (int n = Uniform(1, 4); n > 0; --n) {
          char32_t cp;
          do {
            cp = Range(0x80, 0x10FFFF);
          } while ((cp >= 0xD800 && cp <= 0xDFFF) || (no_metaspace && cp == 0x2581));
          tok::AppendCodepoint(cp, s);
        }
        break;
      case 13:  // a long word (the BPE's merge loop and word cache)
        for (int n = Uniform(20, 200); n > 0; --n) tok::AppendCodepoint(Range('a', 'e'), s);
        break;
      case 14:  // a contraction glued to letters in either case
        s->append(Uniform(0, 1) ? "'" : "\xE2\x80\x99");
        for (int n = Uniform(1, 3); n > 0; --n)
          tok::AppendCodepoint(Uniform(0, 1) ? Range('a', 'z') : Range('A', 'Z'), s);
        break;
      default:  // SentencePiece's own marker
        if (!no_metaspace) tok::AppendCodepoint(0x2581, s);
        break;
    }
  }

  std::mt19937_64 rng_;
};

std::string Streamed(const Tokenizer& t, const std::vector<int32_t>& ids) {
  StreamingDetokenizer d(t);
  std::string out;
  for (int32_t id : ids) out += d.Push(id);
  return out + d.Flush();
}

struct Case {
  const char* name;
  const Tokenizer* tokenizer;
  bool nfc;            // normalizes to NFC (HF's Qwen3; not GGUF's), so decodes NFC text
  bool sentencepiece;  // prepends U+2581 to each piece of text and decodes it as a space
};

TEST(TokenizerFuzz, RandomTextRoundTrips) {
  const uint64_t seed = Seed("RandomTextRoundTrips");
  SCOPED_TRACE("TANDEM_FUZZ_SEED=" + std::to_string(seed));
  auto llama_gguf = testing::GgufFromTokenizerJson(
      testing::TokenizerTestData("llama2/tokenizer.json"), "llama", "");
  ASSERT_TRUE(llama_gguf.ok()) << llama_gguf.status();
  auto llama_from_gguf = testing::TokenizerFromGguf(*llama_gguf, "llama2_fuzz.gguf");
  ASSERT_TRUE(llama_from_gguf.ok()) << llama_from_gguf.status();
  auto qwen_gguf =
      testing::GgufFromTokenizerJson(testing::Qwen3Dir() + "/tokenizer.json", "gpt2", "qwen2");
  ASSERT_TRUE(qwen_gguf.ok()) << qwen_gguf.status();
  auto qwen_from_gguf = testing::TokenizerFromGguf(*qwen_gguf, "qwen3_fuzz.gguf");
  ASSERT_TRUE(qwen_from_gguf.ok()) << qwen_from_gguf.status();
  const Case cases[] = {
      {"Llama-2", &testing::Llama2(), false, true},
      {"Llama-2 (GGUF)", llama_from_gguf->get(), false, true},
      {"Qwen3", &testing::Qwen3(), true, false},
      {"Qwen3 (GGUF)", qwen_from_gguf->get(), false, false},
  };
  TextGenerator gen(seed);
  int failures = 0;
  for (int round = 0; round < 400 && failures < 5; ++round) {
    for (const Case& c : cases) {
      std::string text = gen.Next(/*no_metaspace=*/c.sentencepiece);
      SCOPED_TRACE(std::string(c.name) + " round " + std::to_string(round) + " text \"" +
                   Printable(text) + "\"");
      const std::vector<int32_t> ids =
          c.tokenizer->Encode(text, /*add_bos=*/false, /*parse_special=*/false);
      for (int32_t id : ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, static_cast<int32_t>(c.tokenizer->vocab_size()));
      }
      const std::string back = c.tokenizer->Decode(ids);
      // NFC itself is checked against Python's in unicode_test.cc and,
      // through the tokenizers, against HF on random text in
      // tokenizer_golden_test.cc; here it is the library's.
      const std::string want = c.nfc ? tok::Normalize(text, tok::NormalForm::kNfc) : text;
      EXPECT_EQ(back, want) << "decoded \"" << Printable(back) << "\"";
      EXPECT_EQ(Streamed(*c.tokenizer, ids), back);
      // Parsing special-token text may only change how it is tokenized,
      // never what it decodes to (SentencePiece models prepend a U+2581 to
      // the text after a special token, as HF does, so not there).
      if (!c.sentencepiece) {
        const std::vector<int32_t> special =
            c.tokenizer->Encode(text, /*add_bos=*/false, /*parse_special=*/true);
        EXPECT_EQ(c.tokenizer->Decode(special), back);
      }
      if (::testing::Test::HasFailure()) ++failures;
    }
  }
}

}  // namespace
}  // namespace tandem
