#include "coordinator/text/token_id_text_processor.h"

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(TokenIdTextProcessor, RefusesTextAndChatWithAClearError) {
  TokenIdTextProcessor tp(256);
  auto ids = tp.Encode("hello", true);
  ASSERT_FALSE(ids.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ids.status()));
  EXPECT_NE(ids.status().message().find("token ids"), std::string::npos);
  auto chat = tp.ApplyChatTemplate(nlohmann::json::array(), {});
  ASSERT_FALSE(chat.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(chat.status()));
}

TEST(TokenIdTextProcessor, DecodesIdsInRangeToNoText) {
  TokenIdTextProcessor tp(256);
  EXPECT_EQ(tp.vocab_size(), 256);
  auto text = tp.Decode({0, 17, 255});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "");
  EXPECT_TRUE(absl::IsInvalidArgument(tp.Decode({256}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(tp.Decode({-1}).status()));
  EXPECT_EQ(tp.TokenText(5), "");
}

}  // namespace
}  // namespace tandem
