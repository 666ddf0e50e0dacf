// Generated tokens in OpenAI's shapes: the logprobs of /v1/completions ({tokens, token_logprobs,
// top_logprobs, text_offset}) and of /v1/chat/completions ({content: [{token, logprob, bytes,
// top_logprobs}]}), whole or per stream chunk. A token's string is its bytes in the prompt's
// byte space (Tokenizer::token_bytes: a special token is its text, "<|eot_id|>"); bytes that
// are not UTF-8 on their own (part of a character) are replaced in strings and kept in `bytes`.
#pragma once

#include <cstddef>
#include <span>

#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "replica/core/engine.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc {

// OpenAI's stand-in for a logprob of -inf (a token the processed distribution excludes).
inline constexpr double kMinLogprob = -9999.0;

// How logprobs name a token: by its text, or (vLLM's return_tokens_as_token_ids) as
// "token_id:N", which no two tokens share.
enum class TokenNames { kText, kIds };

// Completions: text_offset counts the choice's text before the first token, in characters (code
// points of the text as shown: valid_utf8's, one per U+FFFD; a character split over tokens
// counts before the token that ends it), and is advanced past these tokens' text. The top dict has
// the k most likely tokens and, as vLLM's, the sampled one, keyed by their names: by text as shown
// (invalid UTF-8 as U+FFFD), tokens that show alike, such as the pieces of one character, share the
// entry of the most likely of them; by id every token has its own (and the chat form keeps every
// token either way).
nlohmann::json completion_logprobs_json(std::span<const GeneratedToken> tokens,
                                        const Tokenizer& tokenizer, Utf8CharCounter& text_offset,
                                        TokenNames names = TokenNames::kText);
// Chat: {"content": [...], "refusal": null}, exactly k top entries per token; with kIds each
// "token" is "token_id:N" and "bytes" stays the token's bytes.
nlohmann::json chat_logprobs_json(std::span<const GeneratedToken> tokens,
                                  const Tokenizer& tokenizer, TokenNames names = TokenNames::kText);
// The ids of the tokens.
nlohmann::json token_ids_json(std::span<const GeneratedToken> tokens);

}  // namespace kvc
