// UTF-8 decoding with U+FFFD and Unicode classes.
#include "common/tokenizer/unicode.h"

#include <string>

#include "gtest/gtest.h"

namespace tandem::tok {
namespace {

constexpr char kFffd[] = "\xEF\xBF\xBD";

TEST(UnicodeTest, LossyDecodingReplacesMaximalSubparts) {
  EXPECT_EQ(Utf8Lossy("abc"), "abc");
  EXPECT_EQ(Utf8Lossy("\xE4\xBD\xA0"), "\xE4\xBD\xA0");
  EXPECT_EQ(Utf8Lossy("a\xFF"
                      "b"),
            std::string("a") + kFffd + "b");
  // A cut-off 3-byte character is one maximal subpart -> one U+FFFD.
  EXPECT_EQ(Utf8Lossy("\xE4\xBD"
                      "a"),
            std::string(kFffd) + "a");
  EXPECT_EQ(Utf8Lossy("\xE4\xBD"), kFffd);
  // Each byte of an invalid lead or a surrogate is its own subpart.
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), std::string(kFffd) + kFffd);
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), std::string(kFffd) + kFffd + kFffd);
  EXPECT_EQ(Utf8Lossy("\xF4\x90\x80\x80"),
            std::string(kFffd) + kFffd + kFffd + kFffd);
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), kFffd);
}

TEST(UnicodeTest, StreamingDecodeHoldsIncompleteTail) {
  std::string out;
  EXPECT_EQ(AppendUtf8Lossy("ab\xF0\x9F", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("\xF0\x9F\x98\x80"
                            "c",
                            false, &out),
            5u);
  EXPECT_EQ(out,
            "\xF0\x9F\x98\x80"
            "c");
  out.clear();
  EXPECT_EQ(AppendUtf8Lossy("\xF0"
                            "x",
                            false, &out),
            2u);  // known bad at once
  EXPECT_EQ(out, std::string(kFffd) + "x");
}

TEST(UnicodeTest, Validity) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\x80"));  // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));  // surrogate
}

TEST(UnicodeTest, Classes) {
  EXPECT_TRUE(IsNumeric('7'));
  EXPECT_TRUE(IsNumeric(0x00B2));   // ² (No)
  EXPECT_TRUE(IsNumeric(0x0663));   // Arabic-Indic three (Nd)
  EXPECT_TRUE(IsNumeric(0x2460));   // ① (No)
  EXPECT_FALSE(IsNumeric(0x4E94));  // 五 is a letter (Lo)
  EXPECT_TRUE(IsAlphanumeric(0x00E9));
  EXPECT_FALSE(IsAlphanumeric('_'));
  EXPECT_TRUE(IsWhitespace(0x0085));
  EXPECT_TRUE(IsWhitespace(0x3000));
  EXPECT_FALSE(IsWhitespace(0x200B));  // zero width space is not White_Space
  // Unicode 15.0 and 16.0, as HF tokenizers classes them (Rust's char is 16.0).
  EXPECT_TRUE(IsNumeric(0x1E4F0));        // Nag Mundari digit zero (15.0, Nd)
  EXPECT_TRUE(IsNumeric(0x1CCF0));        // outlined digit zero (16.0, Nd)
  EXPECT_TRUE(IsNumeric(0x10D40));        // Garay digit zero (16.0, Nd)
  EXPECT_TRUE(IsAlphanumeric(0x13460));   // Egyptian hieroglyph (16.0, Lo)
  EXPECT_TRUE(IsAlphanumeric(0x10D4E));   // Garay vowel length mark (16.0, Lm)
  EXPECT_FALSE(IsAlphanumeric(0x1CCFA));  // still unassigned in 16.0
  EXPECT_FALSE(IsNumeric(0x13460));
}

TEST(UnicodeTest, NormalForms) {
  EXPECT_EQ(Normalize("e\xCC\x81", NormalForm::kNfc), "\xC3\xA9");
  EXPECT_EQ(Normalize("\xC3\xA9", NormalForm::kNfd), "e\xCC\x81");
  EXPECT_EQ(Normalize("\xEF\xBC\xA6", NormalForm::kNfkc), "F");  // fullwidth F
  // Hangul: U+11A7 (a vowel jamo, not a trailing consonant) composes with
  // nothing, while U+11A8 does; utf8proc 2.8 dropped the U+11A7. Expected
  // values from Python's unicodedata.normalize (NFC and NFKC agree here).
  struct Case {
    const char* in;
    const char* nfc;
  };
  const Case hangul[] = {
      {"\uC640\u11A7", "\xEC\x99\x80\xE1\x86\xA7"},
      {"\uC640\u11A8", "\xEC\x99\x81"},
      {"\u1100\u1161\u11A7", "\xEA\xB0\x80\xE1\x86\xA7"},
      {"a\u11A7\u11A7e\u0301", "a\xE1\x86\xA7\xE1\x86\xA7\xC3\xA9"},
      {"\u11A7\u0301\u0300", "\xE1\x86\xA7\xCC\x81\xCC\x80"},
      {"\uC640\u11A7\u11A8", "\xEC\x99\x80\xE1\x86\xA7\xE1\x86\xA8"},
  };
  for (const Case& c : hangul) {
    EXPECT_EQ(Normalize(c.in, NormalForm::kNfc), c.nfc) << c.in;
    EXPECT_EQ(Normalize(c.in, NormalForm::kNfkc), c.nfc) << c.in;
  }
  EXPECT_EQ(ToLower("\xC3\x80"
                    "BC"),
            "\xC3\xA0"
            "bc");
}

}  // namespace
}  // namespace tandem::tok
