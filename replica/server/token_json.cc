#include "replica/server/token_json.h"

#include <cmath>

#include "base/utf8.h"

namespace kvc {
namespace {

using json = nlohmann::json;

json logprob_value(float lp) {
  return std::isfinite(lp) ? json(lp) : json(kMinLogprob);
}

// A token's text as the response shows it: valid UTF-8 (invalid sequences as U+FFFD), which the
// serializer writes as it is.
std::string shown(const std::string& bytes) {
  return valid_utf8(bytes);
}

// vLLM's return_tokens_as_token_ids form.
std::string id_name(int32_t id) {
  return "token_id:" + std::to_string(id);
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s)
    b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

json completion_logprobs_json(std::span<const GeneratedToken> tokens, const Tokenizer& tokenizer,
                              Utf8CharCounter& text_offset, TokenNames names) {
  json strings = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  auto key = [&](int32_t id) {
    return names == TokenNames::kIds ? id_name(id) : shown(tokenizer.token_bytes(id));
  };
  for (const GeneratedToken& t : tokens) {
    strings.push_back(names == TokenNames::kIds ? id_name(t.id) : tokenizer.token_bytes(t.id));
    lps.push_back(logprob_value(t.logprob));
    // Keyed by the text shown: tokens that show alike (partial UTF-8 pieces are all U+FFFD)
    // keep the most likely one's entry, so that no key repeats in the response.
    json top = json::object();
    for (const TokenLogprob& e : t.top)
      top.emplace(key(e.token), logprob_value(e.logprob));
    top.emplace(key(t.id), logprob_value(t.logprob));  // kept if present
    tops.push_back(std::move(top));
    offsets.push_back(text_offset.count());
    text_offset.append(t.text);
  }
  return {{"tokens", std::move(strings)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json chat_logprobs_json(std::span<const GeneratedToken> tokens, const Tokenizer& tokenizer,
                        TokenNames names) {
  auto entry = [&](int32_t id, float lp) {
    const std::string s = tokenizer.token_bytes(id);
    return json{{"token", names == TokenNames::kIds ? id_name(id) : s},
                {"logprob", logprob_value(lp)},
                {"bytes", bytes_of(s)}};
  };
  json content = json::array();
  for (const GeneratedToken& t : tokens) {
    json e = entry(t.id, t.logprob);
    json top = json::array();
    for (const TokenLogprob& x : t.top)
      top.push_back(entry(x.token, x.logprob));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json token_ids_json(std::span<const GeneratedToken> tokens) {
  json ids = json::array();
  for (const GeneratedToken& t : tokens)
    ids.push_back(t.id);
  return ids;
}

}  // namespace kvc
