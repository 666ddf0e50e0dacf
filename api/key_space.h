// Which bytes stand for a prompt, and which keys a replica's prefix cache uses: decided here,
// once, for the router and the replica alike.
//
// The router hashes bytes: a completion as its tokenizer's completion prefix + text + suffix (the
// replica publishes both in /v1/info), a chat as its rendering (chat_render.h, or the model's
// template, chat_template.h), a prompt given as token ids as token_id_bytes says. A replica's key
// space follows from its tokenizer (key_space):
//  - kBytes: the byte tokenizer. Token b is byte b, so the cache's token blocks are the router's
//    byte blocks, with the same hashes; a token that is no byte (EOS generated under ignore_eos)
//    ends the chain, and later blocks are never shared.
//  - kTokenIds: a tokenizer whose tokens give their text back byte for byte. Equal bytes can be
//    different tokens, so the cache is keyed by token ids (4 bytes each, in a chain seeded apart
//    from the byte chains); each sequence also hashes the bytes its tokens stand for, so the
//    replica reports its cached blocks as the byte blocks they cover (replica/core/byte_space.h).
//  - kPrivateTokenIds: a tokenizer that does not give its text back (SentencePiece-style ones
//    that prepend a space): token-id keys, and no KV events rather than wrong ones.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvc {

enum class KeySpace { kBytes, kTokenIds, kPrivateTokenIds };

KeySpace key_space(bool tokens_are_bytes, bool round_trips);
const char* key_space_name(KeySpace space);  // "bytes", "token_ids", "private_token_ids"
// Whether a replica in this key space publishes KV events (in the router's byte blocks).
inline bool publishes_kv_events(KeySpace space) {
  return space != KeySpace::kPrivateTokenIds;
}

// The bytes a completion prompt is tokenized and hashed as: the special tokens its tokenizer's
// post-processor puts around a single text (BOS for Meta's Llama 3 file), then the text.
std::string completion_bytes(std::string_view prefix, std::string_view text,
                             std::string_view suffix);

// How a prompt given as token ids becomes bytes. kOneByte: each id (0-255) is the byte it is, as
// the byte tokenizer reads it. kWidenPastByte: the same while every id is a byte, else every id
// as 4 bytes little-endian (the router's key for token ids it cannot turn into text).
enum class TokenIdBytes { kOneByte, kWidenPastByte };
int64_t max_token_id(TokenIdBytes how);  // 255 or 2^32 - 1
// Precondition: every id is in [0, max_token_id(how)].
std::string token_id_bytes(std::span<const int64_t> ids, TokenIdBytes how);

}  // namespace kvc
