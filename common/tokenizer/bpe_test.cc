// The BPE merge loop on tiny hand-made vocabularies.
#include "common/tokenizer/bpe.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::tok {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::unique_ptr<Vocab> MakeVocab(const std::vector<std::string>& pieces) {
  auto v = std::make_unique<Vocab>();
  for (size_t i = 0; i < pieces.size(); ++i) {
    v->Set(static_cast<int32_t>(i), pieces[i], TokenKind::kNormal,
           /*in_model=*/true);
  }
  return v;
}

std::vector<int32_t> Bpe(const BpeModel& m, std::string_view word) {
  std::vector<int32_t> out;
  m.Tokenize(word, &out);
  return out;
}

using Merges = std::vector<std::pair<std::string, std::string>>;

//                                          0    1    2    3     4     5      6
const std::vector<std::string> kPieces = {"a",  "b",   "c", "ab",
                                          "bc", "abc", "aa"};

TEST(BpeTest, LowestRankMergesFirst) {
  auto v = MakeVocab(kPieces);
  // "b c" outranks "a b": abc -> a + bc -> abc (via "a bc").
  auto m = BpeModel::CreateRanked(
      v.get(), Merges{{"b", "c"}, {"a", "b"}, {"a", "bc"}}, {}, false);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Bpe(**m, "abc"), ElementsAre(5));
  // Without "a bc" the word stops at a + bc, although "ab c" would not help
  // either.
  auto m2 = BpeModel::CreateRanked(
      v.get(), Merges{{"b", "c"}, {"a", "b"}, {"ab", "c"}}, {}, false);
  ASSERT_TRUE(m2.ok());
  EXPECT_THAT(Bpe(**m2, "abc"), ElementsAre(0, 4));
  // "a b" first: ab + c -> abc.
  auto m3 = BpeModel::CreateRanked(
      v.get(), Merges{{"a", "b"}, {"b", "c"}, {"ab", "c"}}, {}, false);
  ASSERT_TRUE(m3.ok());
  EXPECT_THAT(Bpe(**m3, "abc"), ElementsAre(5));
  EXPECT_EQ((*m3)->num_merges(), 3u);
}

TEST(BpeTest, TiesGoToTheLeftmostPair) {
  auto v = MakeVocab(kPieces);
  auto m = BpeModel::CreateRanked(v.get(), Merges{{"a", "a"}}, {}, false);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(Bpe(**m, "aaa"), ElementsAre(6, 0));
  EXPECT_THAT(Bpe(**m, "aaaa"), ElementsAre(6, 6));
  EXPECT_THAT(Bpe(**m, "aaaaa"), ElementsAre(6, 6, 0));
  EXPECT_THAT(Bpe(**m, ""), IsEmpty());
}

TEST(BpeTest, UnknownCharactersUseUnkOrAreDropped) {
  auto v = MakeVocab({"a", "b", "<unk>"});
  BpeOptions opt;
  auto dropped = BpeModel::CreateRanked(v.get(), {}, opt, false);
  ASSERT_TRUE(dropped.ok());
  EXPECT_THAT(Bpe(**dropped, "axyb"),
              ElementsAre(0, 1));  // no unk token: HF drops them
  opt.unk_id = 2;
  auto unk = BpeModel::CreateRanked(v.get(), {}, opt, false);
  ASSERT_TRUE(unk.ok());
  EXPECT_THAT(Bpe(**unk, "axyb"), ElementsAre(0, 2, 2, 1));
  opt.fuse_unk = true;
  auto fused = BpeModel::CreateRanked(v.get(), {}, opt, false);
  ASSERT_TRUE(fused.ok());
  EXPECT_THAT(Bpe(**fused, "axyb\xC3\xA9"), ElementsAre(0, 2, 1, 2));
}

TEST(BpeTest, ByteFallback) {
  std::vector<std::string> pieces = {"a", "<unk>"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    pieces.push_back(buf);
  }
  auto v = MakeVocab(pieces);
  BpeOptions opt;
  opt.byte_fallback = true;
  opt.unk_id = 1;
  auto m = BpeModel::CreateRanked(v.get(), {}, opt, false);
  ASSERT_TRUE(m.ok());
  // 'é' = C3 A9 -> two byte tokens; '€' = E2 82 AC -> three.
  EXPECT_THAT(Bpe(**m,
                  "a\xC3\xA9"
                  "a"),
              ElementsAre(0, 2 + 0xC3, 2 + 0xA9, 0));
  EXPECT_THAT(Bpe(**m, "\xE2\x82\xAC"),
              ElementsAre(2 + 0xE2, 2 + 0x82, 2 + 0xAC));
}

TEST(BpeTest, IgnoreMergesKeepsWholeWords) {
  auto v = MakeVocab(kPieces);
  BpeOptions opt;
  opt.ignore_merges = true;
  // No merge builds "abc", but the word is a token.
  auto m = BpeModel::CreateRanked(v.get(), Merges{{"a", "b"}}, opt, false);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(Bpe(**m, "abc"), ElementsAre(5));
  EXPECT_THAT(Bpe(**m, "abca"), ElementsAre(3, 2, 0));
}

TEST(BpeTest, ContinuingSubwordPrefixAndSuffix) {
  auto v = MakeVocab({"a", "##b", "ab", "c</w>", "##c</w>", "abc</w>"});
  BpeOptions opt;
  opt.continuing_subword_prefix = "##";
  opt.end_of_word_suffix = "</w>";
  auto m = BpeModel::CreateRanked(
      v.get(), Merges{{"a", "##b"}, {"ab", "##c</w>"}}, opt, false);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_THAT(Bpe(**m, "abc"), ElementsAre(5));
  EXPECT_THAT(Bpe(**m, "c"), ElementsAre(3));
}

TEST(BpeTest, BadMerges) {
  auto v = MakeVocab(kPieces);
  auto bad = BpeModel::CreateRanked(v.get(), Merges{{"a", "z"}}, {}, false);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("'a z'"));
  auto missing_result =
      BpeModel::CreateRanked(v.get(), Merges{{"c", "a"}}, {}, false);
  EXPECT_FALSE(missing_result.ok());
  auto skipped =
      BpeModel::CreateRanked(v.get(), Merges{{"a", "z"}, {"a", "b"}}, {}, true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ((*skipped)->num_merges(), 1u);
  EXPECT_THAT(Bpe(**skipped, "ab"), ElementsAre(3));
}

TEST(BpeTest, ScoredMergesFollowTheMergedTokensScore) {
  //                           0    1    2    3     4     5      6
  auto v = MakeVocab({"a", "b", "c", "ab", "bc", "abc", "aa"});
  auto m = BpeModel::CreateScored(v.get(), {0, 0, 0, -1, -2, -3, -10}, {});
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(Bpe(**m, "abc"), ElementsAre(5));  // ab (-1) first, then abc
  auto m2 = BpeModel::CreateScored(v.get(), {0, 0, 0, -2, -1, -3, -10}, {});
  ASSERT_TRUE(m2.ok());
  EXPECT_THAT(Bpe(**m2, "abc"), ElementsAre(5));  // bc first, then a+bc = abc
  auto m3 = BpeModel::CreateScored(v.get(), {0, 0, 0, -2, -1, -3, -10}, {});
  EXPECT_THAT(Bpe(**m3, "aaa"), ElementsAre(6, 0));  // ties: leftmost
  EXPECT_FALSE(
      BpeModel::CreateScored(v.get(), {0, 0}, {}).ok());  // wrong score count
}

TEST(BpeTest, CachesWords) {
  auto v = MakeVocab(kPieces);
  auto m = BpeModel::CreateRanked(v.get(), Merges{{"a", "b"}}, {}, false);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->cache_size(), 0u);
  EXPECT_THAT(Bpe(**m, "abab"), ElementsAre(3, 3));
  EXPECT_EQ((*m)->cache_size(), 1u);
  EXPECT_THAT(Bpe(**m, "abab"), ElementsAre(3, 3));
  EXPECT_EQ((*m)->cache_size(), 1u);
  EXPECT_THAT(Bpe(**m, std::string(1000, 'a')).size(),
              1000u);  // too long to cache
  EXPECT_EQ((*m)->cache_size(), 1u);
}

}  // namespace
}  // namespace tandem::tok
