// A compiled Unicode regular expression (PCRE2, UTF-8 with Unicode properties, JIT when the
// platform has it): the split patterns of Hugging Face pre-tokenizers (\p{L}, \p{N}, (?i:...),
// lookahead). Immutable after construction; safe to use from several threads at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace kvc {

class UnicodeRegex {
 public:
  // The error names the offset in the pattern where PCRE2 gave up.
  static Result<std::unique_ptr<UnicodeRegex>> compile(std::string_view pattern);
  ~UnicodeRegex();
  UnicodeRegex(const UnicodeRegex&) = delete;
  UnicodeRegex& operator=(const UnicodeRegex&) = delete;

  // Calls on_piece(begin, end) for every match of the pattern in `text` and for every stretch
  // between matches, in order (the "Isolated" split behaviour: the pieces tile the text).
  // Precondition: `text` is valid UTF-8 (the caller splits invalid bytes off first).
  template <typename OnPiece>
  void split(std::string_view text, OnPiece&& on_piece) const;

 private:
  struct Impl;
  explicit UnicodeRegex(std::unique_ptr<Impl> impl);
  // The next match at or after `from`: [begin, end); false when there is none.
  bool find(std::string_view text, size_t from, void* match_data, size_t& begin, size_t& end) const;
  void* new_match_data() const;
  static void free_match_data(void* match_data);

  std::unique_ptr<Impl> impl_;
};

template <typename OnPiece>
void UnicodeRegex::split(std::string_view text, OnPiece&& on_piece) const {
  void* md = new_match_data();
  size_t at = 0, begin = 0, end = 0;
  while (at < text.size() && find(text, at, md, begin, end)) {
    if (begin > at) on_piece(at, begin);
    if (end == begin) {  // an empty match: step over one character
      end = begin + 1;
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80)
        ++end;
      on_piece(begin, end);
    } else {
      on_piece(begin, end);
    }
    at = end;
  }
  if (at < text.size()) on_piece(at, text.size());
  free_match_data(md);
}

}  // namespace kvc
