#include "api/key_space.h"

#include <vector>

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(KeySpace, FollowsTheTokenizer) {
  EXPECT_EQ(key_space(true, true), KeySpace::kBytes);
  EXPECT_EQ(key_space(false, true), KeySpace::kTokenIds);
  EXPECT_EQ(key_space(false, false), KeySpace::kPrivateTokenIds);
  EXPECT_TRUE(publishes_kv_events(KeySpace::kBytes));
  EXPECT_TRUE(publishes_kv_events(KeySpace::kTokenIds));
  EXPECT_FALSE(publishes_kv_events(KeySpace::kPrivateTokenIds));
  EXPECT_STREQ(key_space_name(KeySpace::kTokenIds), "token_ids");
}

TEST(KeySpace, CompletionBytesWrapTheText) {
  EXPECT_EQ(completion_bytes("<|begin_of_text|>", "Hello", ""), "<|begin_of_text|>Hello");
  EXPECT_EQ(completion_bytes("", "Hello", ""), "Hello");
}

TEST(KeySpace, TokenIdsAsBytes) {
  const std::vector<int64_t> small = {72, 105, 0, 255};
  EXPECT_EQ(token_id_bytes(small, TokenIdBytes::kOneByte), std::string("Hi\0\xff", 4));
  // Widening only when an id is no byte, and then every id: equal bytes stay equal keys.
  EXPECT_EQ(token_id_bytes(small, TokenIdBytes::kWidenPastByte), std::string("Hi\0\xff", 4));
  const std::vector<int64_t> wide = {72, 128009};
  EXPECT_EQ(token_id_bytes(wide, TokenIdBytes::kWidenPastByte),
            std::string("\x48\0\0\0\x09\xf4\x01\0", 8));
  EXPECT_EQ(max_token_id(TokenIdBytes::kOneByte), 255);
  EXPECT_EQ(max_token_id(TokenIdBytes::kWidenPastByte), 4294967295);
}

}  // namespace
}  // namespace kvc
