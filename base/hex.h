// One hexadecimal digit's value: block hashes in KV events (prefix_index/kv_event.cc) and %XX
// escapes in request paths (http/listener.cc path_rest_decoded).
#pragma once

namespace kvc {

// 0-15, or -1 for a character that is not a hexadecimal digit (either case).
constexpr int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace kvc
