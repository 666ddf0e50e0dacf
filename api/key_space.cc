#include "api/key_space.h"

namespace kvc {

KeySpace key_space(bool tokens_are_bytes, bool round_trips) {
  if (tokens_are_bytes) return KeySpace::kBytes;
  return round_trips ? KeySpace::kTokenIds : KeySpace::kPrivateTokenIds;
}

const char* key_space_name(KeySpace space) {
  switch (space) {
    case KeySpace::kBytes:
      return "bytes";
    case KeySpace::kTokenIds:
      return "token_ids";
    case KeySpace::kPrivateTokenIds:
      return "private_token_ids";
  }
  return "?";
}

std::string completion_bytes(std::string_view prefix, std::string_view text,
                             std::string_view suffix) {
  std::string out;
  out.reserve(prefix.size() + text.size() + suffix.size());
  out.append(prefix).append(text).append(suffix);
  return out;
}

int64_t max_token_id(TokenIdBytes how) {
  return how == TokenIdBytes::kOneByte ? 255 : int64_t{0xffffffff};
}

std::string token_id_bytes(std::span<const int64_t> ids, TokenIdBytes how) {
  bool wide = false;
  if (how == TokenIdBytes::kWidenPastByte) {
    for (int64_t id : ids)
      wide = wide || id > 255;
  }
  std::string bytes;
  bytes.reserve(ids.size() * (wide ? 4 : 1));
  for (int64_t id : ids) {
    const auto v = static_cast<uint32_t>(id);
    if (!wide) {
      bytes.push_back(static_cast<char>(v));
      continue;
    }
    for (int b = 0; b < 4; ++b)
      bytes.push_back(static_cast<char>((v >> (8 * b)) & 0xff));
  }
  return bytes;
}

}  // namespace kvc
