// A label that travels as it is in HTTP headers, JSON and TSV columns (a weight version, a
// replica id): 1 to 128 printable ASCII characters without spaces.
#pragma once

#include <algorithm>
#include <string_view>

namespace kvc {

inline bool is_plain_label(std::string_view v) {
  return !v.empty() && v.size() <= 128 &&
         std::all_of(v.begin(), v.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

}  // namespace kvc
