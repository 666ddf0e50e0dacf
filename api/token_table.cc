#include "api/token_table.h"

#include <limits>

namespace kvc {
namespace {

constexpr std::string_view kMagic = "kvcascade-token-bytes-1\n";

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t get_le(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= uint64_t{static_cast<unsigned char>(s[at + i])} << (8 * i);
  return v;
}

}  // namespace

std::optional<std::string> TokenTable::prompt_bytes(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= bytes.size()) return std::nullopt;
    out += bytes[id];
  }
  return out;
}

std::string encode_token_table(const TokenTable& table) {
  std::string out(kMagic);
  put_le(out, table.bytes.size(), 4);
  for (const std::string& b : table.bytes) {
    // No token's text is near 64 KiB; a longer one is cut rather than break the format.
    const size_t n = std::min<size_t>(b.size(), std::numeric_limits<uint16_t>::max());
    put_le(out, n, 2);
    out.append(b, 0, n);
  }
  return out;
}

Result<TokenTable> decode_token_table(std::string_view body) {
  if (!body.starts_with(kMagic)) return Error{"token table: not a kvcascade token table"};
  size_t at = kMagic.size();
  if (body.size() < at + 4) return Error{"token table: truncated"};
  const uint64_t count = get_le(body, at, 4);
  at += 4;
  // Each token takes at least its 2-byte length: a count the body cannot hold is refused before
  // anything is allocated.
  if (count > (body.size() - at) / 2) return Error{"token table: truncated"};
  TokenTable t;
  t.bytes.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (body.size() < at + 2) return Error{"token table: truncated"};
    const size_t n = get_le(body, at, 2);
    at += 2;
    if (body.size() < at + n) return Error{"token table: truncated"};
    t.bytes.emplace_back(body.substr(at, n));
    at += n;
  }
  if (at != body.size()) return Error{"token table: bytes after the last token"};
  return t;
}

}  // namespace kvc
