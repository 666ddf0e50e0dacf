// base/utf8.h: valid UTF-8 passes unchanged; each invalid sequence becomes one U+FFFD.
#include "base/utf8.h"

#include <string>

#include <gtest/gtest.h>

namespace kvc {
namespace {

constexpr char kR[] = "\xEF\xBF\xBD";  // U+FFFD

TEST(ValidUtf8, ValidTextIsUnchanged) {
  for (const std::string& s : {std::string(""), std::string("plain ascii"),
                               std::string("h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"),
                               std::string("\xED\x9F\xBF\xF4\x8F\xBF\xBF", 7)}) {
    EXPECT_EQ(valid_utf8(s), s);
  }
}

TEST(ValidUtf8, EachInvalidSequenceIsOneReplacement) {
  EXPECT_EQ(valid_utf8("\xE2"), kR);                                 // a lone lead byte
  EXPECT_EQ(valid_utf8("\x80"), kR);                                 // a lone continuation
  EXPECT_EQ(valid_utf8("a\xE2\x82z"), std::string("a") + kR + "z");  // cut short
  EXPECT_EQ(valid_utf8("\xC0\xAF"), std::string(kR) + kR);  // overlong: bad lead, then a lone
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), std::string(kR) + kR + kR);           // a surrogate
  EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), std::string(kR) + kR + kR + kR);  // past U+10FFFF
  EXPECT_EQ(valid_utf8("\xFF\xC3\xA9"), std::string(kR) + "\xC3\xA9");
}

}  // namespace
}  // namespace kvc
