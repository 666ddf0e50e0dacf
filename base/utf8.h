// Text that must be valid UTF-8 (JSON strings, error messages) from bytes that need not be.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvc {

// `bytes` with each invalid UTF-8 sequence (its longest valid-looking start, or a lone bad byte)
// replaced by one U+FFFD; valid input comes back unchanged. Strict as RFC 3629: no overlong
// forms, surrogates or code points past U+10FFFF.
inline std::string valid_utf8(std::string_view bytes) {
  constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
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
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;  // bytes of the sequence that fit so far
    for (; k <= more && i + k < bytes.size(); ++k) {
      const auto b = static_cast<unsigned char>(bytes[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
    }
    if (k == more + 1) {
      out.append(bytes.substr(i, k));
    } else {
      out += kReplacement;
    }
    i += k;
  }
  return out;
}

}  // namespace kvc
