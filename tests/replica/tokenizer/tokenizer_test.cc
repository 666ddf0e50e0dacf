#include "replica/tokenizer/tokenizer.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(ByteTokenizer, TokensAreBytes) {
  const ByteTokenizer tok;
  const std::string text = std::string("h\xc3\xa9") + '\0' + "\xff";  // UTF-8, NUL, 0xff
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids, (std::vector<int32_t>{'h', 0xc3, 0xa9, 0, 0xff}));
  std::string back;
  for (int32_t t : ids)
    back += tok.decode(t);
  EXPECT_EQ(back, text);
  EXPECT_EQ(tok.eos_token(), 256);
  EXPECT_EQ(tok.vocab_size(), 257);
  EXPECT_EQ(tok.decode(256), "");
  EXPECT_EQ(tok.decode(300), "");
  EXPECT_EQ(tok.decode(-1), "");
}

TEST(TokensToBytes, AppendsOnlyWhenAllAreBytes) {
  std::string out = "ab";
  const std::vector<int32_t> ok = {'c', 0, 255};
  EXPECT_TRUE(tokens_to_bytes(ok, out));
  EXPECT_EQ(out, std::string("abc") + '\0' + "\xff");
  const std::vector<int32_t> bad = {'d', 256};
  EXPECT_FALSE(tokens_to_bytes(bad, out));
  EXPECT_EQ(out, std::string("abc") + '\0' + "\xff");
}

}  // namespace
}  // namespace kvc
