// A replica's tokens as the bytes they stand for in the router's key space (Tokenizer::
// token_bytes): what a router needs to hash a prompt that came as token ids the way the replica's
// KV events describe its cache (api/key_space.h, kTokenIds). The replica serves it at
// GET /v1/token_bytes; the router fetches it once per replica and tokenizer.
//
// Wire format (application/octet-stream, little-endian): "kvcascade-token-bytes-1\n", a uint32
// token count, then per token a uint16 byte length and the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

struct TokenTable {
  std::vector<std::string> bytes;  // token id -> its bytes

  // The bytes of a prompt given as ids; nullopt when an id is not in the table.
  std::optional<std::string> prompt_bytes(std::span<const int32_t> ids) const;
};

std::string encode_token_table(const TokenTable& table);
Result<TokenTable> decode_token_table(std::string_view body);

}  // namespace kvc
