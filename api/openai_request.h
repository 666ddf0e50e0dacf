// The OpenAI-compatible request bodies both servers accept, parsed and validated once: the router
// needs the prompt bytes (to hash them), n, the group id and the cache salt; the replica needs
// everything. Errors carry the HTTP status and the offending field, for an OpenAI-style reply.
//
// Prompts are bytes: /v1/completions takes a string, an array of strings, an array of token ids
// or an array of token-id arrays (kept as ids in prompt_token_ids; their bytes are the ids as
// token_id_bytes(kWidenPastByte) writes them: with the byte tokenizer a token id is a byte);
// /v1/chat/completions renders `messages` with the model's chat template (chat_template.h) or,
// for a model without one, with render_chat (chat_render.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "api/chat_template.h"
#include "base/text_span.h"

namespace kvc {

enum class Endpoint { kCompletions, kChatCompletions };

// A chat request without max_tokens may run to the end of the context: a bound, not a plan. The
// completion tokens per sample that routers and replicas plan for such a request ("open") until
// a replica has seen open requests end (Scheduler::planned_open_completion, GET /v1/load).
inline constexpr int32_t kPlannedOpenCompletionTokens = 256;

struct ApiLimits {
  int32_t max_n = 256;           // samples per prompt
  int32_t max_tokens = 1 << 16;  // per sample
  size_t max_prompts = 64;       // prompts in one /v1/completions batch
  size_t max_stop = 4;           // stop strings (OpenAI's limit)
  size_t max_stop_bytes = 256;
  size_t max_stop_token_ids = 64;
};

struct OpenAiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::vector<std::string> prompts;  // rendered prompt bytes, one per sibling group
  // Per prompt (or none): byte ranges holding the client's text in a chat prompt rendered with a
  // model's template, which the replica's tokenizer encodes as plain text (text_span.h). A chat
  // prompt rendered canonically is one range: it holds no special token at all.
  std::vector<std::vector<TextSpan>> literal;
  // Some prompt came as token ids.
  bool token_id_prompts = false;
  // Per prompt: its token ids when it came as ids (the replica feeds them to the model as they
  // are: no BOS added), else empty. Empty altogether when no prompt came as ids.
  std::vector<std::vector<int32_t>> prompt_token_ids;
  int32_t n = 1;
  int32_t max_tokens = 16;
  bool max_tokens_given = false;  // the client set max_tokens (or chat's max_completion_tokens)
  // A chat request without max_tokens: bounded by the context only (kPlannedOpenCompletionTokens).
  bool open_completion() const {
    return endpoint == Endpoint::kChatCompletions && !max_tokens_given;
  }
  // Nothing but max_tokens ends a choice (ignore_eos and no stop strings or stop ids); as
  // SamplingParams::runs_to_max_tokens, which the replica builds from these fields.
  bool runs_to_max_tokens() const { return ignore_eos && stop.empty() && stop_token_ids.empty(); }
  // Absent: the model's default (its generation_config.json), else 1, 1 and off.
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;  // extension (vLLM): 0 = off
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;      // extension (vLLM): each ends a choice as EOS does
  bool ignore_eos = false;                  // extension (vLLM)
  bool include_stop_str_in_output = false;  // extension (vLLM): a matched stop string is kept
  // extension (vLLM): a completion's prompt gets the tokenizer's special tokens (BOS); chat: false
  bool add_special_tokens = true;
  bool skip_special_tokens = true;  // extension (vLLM): false puts special tokens' text in it
  // -1: no logprobs. Else each generated token's logprob and the `logprobs` (0-20) most likely
  // tokens': completions' "logprobs": k, chat's "logprobs": true with "top_logprobs": k.
  int32_t logprobs = -1;
  // extension (vLLM): each choice carries its prompt's token ids and its own.
  bool return_token_ids = false;
  // extension (vLLM): logprobs name tokens "token_id:N" (completions' tokens and top_logprobs
  // keys, chat's token fields) instead of their text, which can show alike.
  bool return_tokens_as_token_ids = false;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  std::optional<std::string> group;  // extension: requests sharing a group id are siblings
  int32_t group_size = 0;  // extension: requests the client sends with `group` (0: unsaid)
  std::string cache_salt;  // extension: requests with different salts never share KV
  std::string user;
};

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the offending field, empty if none
};

// kFull: what a kvcascade replica serves, every field checked. kRouting: what a router needs to
// route a request to another engine (vLLM, SGLang), which validates it itself: model, prompt
// bytes, n, stream, group, cache_salt; other fields and their ranges are not checked, token ids
// may exceed 255 (then every id is 4 little-endian bytes), and chat messages the canonical
// rendering refuses (image parts, odd names) become the concatenation of each message's JSON, so
// a conversation's next turn still extends its previous one. A body kFull accepts gets the same
// prompt bytes in both modes.
enum class ParseMode { kFull, kRouting };

// The chat template of the model a request names (null: canonical rendering, chat_render.h).
using ChatTemplateFor =
    std::function<std::shared_ptr<const ChatTemplate>(const std::string& model)>;

// A weight version (POST /v1/admin/weights, x-kvcascade-weight-version): it travels in headers
// and JSON, so 1 to 128 printable ASCII characters without spaces.
bool valid_weight_version(std::string_view version);

// Never throws. Unknown fields are ignored, as OpenAI-compatible servers do. Chat messages are
// rendered with template_for(model) when it gives a template, else canonically.
// A request body, and how many bytes its buffer holds past its end (a std::string's capacity
// beyond its size, e.g. http::RequestBody's padding): with 64 or more the JSON parser reads the
// body in place instead of copying it into a padded buffer first.
struct JsonBody {
  JsonBody(std::string_view b) : bytes(b) {}  // NOLINT(google-explicit-constructor)
  JsonBody(const char* b) : bytes(b) {}       // NOLINT(google-explicit-constructor)
  JsonBody(const std::string& b)              // NOLINT(google-explicit-constructor)
      : bytes(b), slack(b.capacity() - b.size()) {}
  std::string_view bytes;
  size_t slack = 0;
};

std::variant<OpenAiRequest, ApiError> parse_openai_request(Endpoint endpoint, JsonBody body,
                                                           const ApiLimits& limits = {},
                                                           const ChatTemplateFor& template_for = {},
                                                           ParseMode mode = ParseMode::kFull);

}  // namespace kvc
