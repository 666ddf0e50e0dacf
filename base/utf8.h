// Text that must be valid UTF-8 (JSON strings, error messages) from bytes that need not be.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvc {

// Walks `bytes` as valid_utf8 reads them: calls unit(begin, length, valid) for each character
// (valid) or each invalid sequence (its longest valid-looking start, or a lone bad byte), in
// order. Strict as RFC 3629: no overlong forms, surrogates or code points past U+10FFFF. Returns
// where an unfinished last sequence begins (a valid start cut short by the end of `bytes`, shown as
// one U+FFFD until more bytes come), or bytes.size() when there is none.
template <typename Unit>
size_t for_each_utf8_unit(std::string_view bytes, Unit&& unit) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      unit(i, size_t{1}, true);
      ++i;
      continue;
    }
    size_t more = 0;                     // continuation bytes the lead byte asks for
    unsigned char lo = 0x80, hi = 0xBF;  // the range of the first of them
    if (c >= 0xC2 && c <= 0xDF) {
      more = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      more = 2;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      more = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
    } else {
      unit(i, size_t{1}, false);
      ++i;
      continue;
    }
    size_t k = 1;  // bytes of the sequence that fit so far
    for (; k <= more && i + k < bytes.size(); ++k) {
      const auto b = static_cast<unsigned char>(bytes[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
    }
    const bool complete = k == more + 1;
    unit(i, k, complete);
    if (!complete && i + k == bytes.size()) return i;  // cut short by the end
    i += k;
  }
  return bytes.size();
}

// `bytes` with each invalid UTF-8 sequence (its longest valid-looking start, or a lone bad byte)
// replaced by one U+FFFD; valid input comes back unchanged.
inline std::string valid_utf8(std::string_view bytes) {
  constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  for_each_utf8_unit(bytes, [&](size_t begin, size_t length, bool valid) {
    if (valid) {
      out.append(bytes.substr(begin, length));
    } else {
      out += kReplacement;
    }
  });
  return out;
}

// The characters (code points) of valid_utf8(text) for a text given piece by piece, without
// keeping it: what was appended is settled but for an unfinished last sequence, which counts one
// (its U+FFFD, or the character it becomes). OpenAI's text_offset counts these.
class Utf8CharCounter {
 public:
  size_t count() const { return settled_ + (unfinished_.empty() ? 0 : 1); }
  void append(std::string_view bytes) {
    unfinished_ += bytes;
    size_t units = 0;
    const size_t cut = for_each_utf8_unit(unfinished_, [&](size_t, size_t, bool) { ++units; });
    if (cut < unfinished_.size()) --units;  // the unfinished sequence: still open
    settled_ += units;
    unfinished_.erase(0, cut);
  }

 private:
  size_t settled_ = 0;
  std::string unfinished_;  // at most 3 bytes: a valid start cut short
};

}  // namespace kvc
