// base/utf8.h: valid UTF-8 passes unchanged; each invalid sequence becomes one U+FFFD.
#include "base/utf8.h"

#include <random>
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

// Utf8CharCounter counts, piece by piece, the characters valid_utf8 shows for the whole text so
// far (an unfinished last sequence as the one character it shows), whatever the pieces: checked
// against counting valid_utf8 of each prefix, over random bytes where UTF-8 goes wrong.
TEST(Utf8CharCounter, CountsWhatValidUtf8ShowsForEveryPrefix) {
  auto code_points = [](const std::string& valid) {
    size_t n = 0;
    for (unsigned char c : valid)
      n += (c & 0xC0) != 0x80;
    return n;
  };
  const unsigned char alphabet[] = {'a',  0x80, 0xBF, 0xC3, 0xA9, 0xE2, 0x82, 0xAC,
                                    0xED, 0xA0, 0xF0, 0x9F, 0xF4, 0x90, 0xC0, 0xFF};
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    Utf8CharCounter counter;
    std::string text;
    for (int piece = 0; piece < 12; ++piece) {
      std::string bytes;
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
        bytes += static_cast<char>(alphabet[rng() % sizeof(alphabet)]);
      text += bytes;
      counter.append(bytes);
      ASSERT_EQ(counter.count(), code_points(valid_utf8(text)))
          << "round " << round << " piece " << piece;
    }
  }
  Utf8CharCounter split;  // a character over three pieces counts once, from its first
  split.append("\xE2");
  EXPECT_EQ(split.count(), 1u);
  split.append("\x82");
  split.append("\xAC");
  EXPECT_EQ(split.count(), 1u);
  split.append("\x80");  // a lone continuation: one more
  EXPECT_EQ(split.count(), 2u);
}

}  // namespace
}  // namespace kvc
