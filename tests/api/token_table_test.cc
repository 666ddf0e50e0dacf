#include "api/token_table.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(TokenTable, RoundTripsAndMapsIdsToBytes) {
  TokenTable t;
  t.bytes = {"a", "", std::string("\0\xff", 2), "<|eot_id|>", std::string(300, 'x')};
  const Result<TokenTable> back = decode_token_table(encode_token_table(t));
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->bytes, t.bytes);
  const std::vector<int32_t> ids = {3, 0, 2};
  EXPECT_EQ(back->prompt_bytes(ids), std::string("<|eot_id|>a\0\xff", 13));
  const std::vector<int32_t> out_of_range = {0, 5};
  EXPECT_FALSE(back->prompt_bytes(out_of_range));
  const std::vector<int32_t> negative = {-1};
  EXPECT_FALSE(back->prompt_bytes(negative));
}

TEST(TokenTable, MalformedBodiesAreRefused) {
  TokenTable t;
  t.bytes = {"ab", "c"};
  const std::string good = encode_token_table(t);
  EXPECT_FALSE(decode_token_table("").ok());
  EXPECT_FALSE(decode_token_table("not a table").ok());
  for (size_t cut = 1; cut < good.size(); ++cut)
    EXPECT_FALSE(decode_token_table(good.substr(0, good.size() - cut)).ok()) << cut;
  EXPECT_FALSE(decode_token_table(good + "x").ok());
  // A count the body cannot hold is refused before anything is allocated.
  std::string huge = good;
  const size_t count_at = std::string("kvcascade-token-bytes-1\n").size();
  huge[count_at + 3] = '\x7f';
  EXPECT_FALSE(decode_token_table(huge).ok());
}

}  // namespace
}  // namespace kvc
