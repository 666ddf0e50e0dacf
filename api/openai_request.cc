#include "api/openai_request.h"

#include <algorithm>

#include <simdjson.h>
#include <nlohmann/json.hpp>

#include "api/chat_render.h"
#include "api/key_space.h"
#include "base/label.h"

namespace kvc {
namespace {

// Ordered: a chat template's tojson writes the client's keys in the client's order, as Python's
// json.dumps does (api/chat_template.h).
using json = nlohmann::ordered_json;

constexpr int32_t kMaxLogprobs = 20;  // OpenAI's top_logprobs limit

ApiError bad(std::string param, std::string message) {
  return ApiError{400, param.empty() ? message : param + ": " + message, std::move(param)};
}

// Reads an optional number field into `out` within [lo, hi].
template <typename T>
std::optional<ApiError> number(const json& j, const char* key, T& out, double lo, double hi,
                               const char* range) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (std::is_integral_v<T> ? !it->is_number_integer() : !it->is_number()) {
    return bad(key, std::is_integral_v<T> ? "must be an integer" : "must be a number");
  }
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) return bad(key, std::string("must be ") + range);
  out = it->get<T>();
  return std::nullopt;
}

// The same for a field whose absence matters (the replica fills it from the model's defaults).
template <typename T>
std::optional<ApiError> number(const json& j, const char* key, std::optional<T>& out, double lo,
                               double hi, const char* range) {
  T v{};
  if (auto e = number(j, key, v, lo, hi, range)) return e;
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = v;
  return std::nullopt;
}

// Text prompts are moved out of `p` (a long prompt is not copied again).
std::optional<ApiError> prompts_from(json& p, const ApiLimits& limits, ParseMode mode,
                                     OpenAiRequest& r) {
  std::vector<std::string>& out = r.prompts;
  auto text_prompt = [&](std::string text) {
    out.push_back(std::move(text));
    if (r.token_id_prompts) r.prompt_token_ids.emplace_back();
  };
  auto tokens_to_prompt = [&](const json& arr,
                              const std::string& where) -> std::optional<ApiError> {
    // A model's token ids are int32 (the replica checks them against its vocabulary); a router
    // in front of other engines takes any 32-bit id.
    const int64_t max_id =
        mode == ParseMode::kFull ? INT32_MAX : max_token_id(TokenIdBytes::kWidenPastByte);
    std::vector<int64_t> ids;
    ids.reserve(arr.size());
    for (size_t i = 0; i < arr.size(); ++i) {
      if (!arr[i].is_number_integer() || arr[i].get<int64_t>() < 0 ||
          arr[i].get<int64_t>() > max_id) {
        return bad(where + "[" + std::to_string(i) + "]",
                   mode == ParseMode::kFull ? "token ids must be integers 0 to 2^31 - 1"
                                            : "token ids must be non-negative 32-bit integers");
      }
      ids.push_back(arr[i].get<int64_t>());
    }
    if (!r.token_id_prompts) r.prompt_token_ids.resize(out.size());  // earlier text prompts
    r.token_id_prompts = true;
    out.push_back(token_id_bytes(ids, TokenIdBytes::kWidenPastByte));
    r.prompt_token_ids.emplace_back(ids.begin(), ids.end());
    return std::nullopt;
  };
  if (p.is_string()) {
    text_prompt(std::move(p.get_ref<std::string&>()));
    return std::nullopt;
  }
  if (!p.is_array() || p.empty()) {
    return bad("prompt", "must be a string, an array of strings or an array of token ids");
  }
  if (p.size() > limits.max_prompts && !p[0].is_number_integer()) {
    return bad("prompt", "at most " + std::to_string(limits.max_prompts) + " prompts per request");
  }
  if (p[0].is_number_integer()) return tokens_to_prompt(p, "prompt");
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (p[i].is_string()) {
      text_prompt(std::move(p[i].get_ref<std::string&>()));
    } else if (p[i].is_array() && !p[i].empty()) {
      if (auto e = tokens_to_prompt(p[i], where)) return e;
    } else {
      return bad(where, "must be a string or a non-empty array of token ids");
    }
  }
  return std::nullopt;
}

// Chat messages the canonical rendering refuses, as bytes to route by: each message's JSON on
// a line of its own, so that adding a message appends bytes.
std::optional<std::string> routing_bytes_of_messages(const json& messages) {
  if (!messages.is_array() || messages.empty()) return std::nullopt;
  std::string out;
  for (const json& m : messages)
    out += m.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return out;
}

// kRouting: the fields a router routes by, best effort; the engine behind it checks the rest.
void routing_fields(const json& j, const ApiLimits& limits, OpenAiRequest& r) {
  if (auto it = j.find("n"); it != j.end() && it->is_number_integer()) {
    r.n = static_cast<int32_t>(std::clamp<int64_t>(it->get<int64_t>(), 1, limits.max_n));
  }
  if (auto it = j.find("stream"); it != j.end() && it->is_boolean()) r.stream = it->get<bool>();
  auto text = [&](const char* key, size_t max) -> std::optional<std::string> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().size() > max) {
      return std::nullopt;
    }
    return it->get<std::string>();
  };
  r.cache_salt = text("cache_salt", 1024).value_or("");
  r.group = text("group", 256);
}

// Known sampling fields this server does not implement are refused unless they ask for what it
// does anyway (their neutral value, which clients such as LangChain send by default): the
// tokens would otherwise differ from what the client asked for, without a word.
std::optional<ApiError> unsupported_sampling(const json& j, const OpenAiRequest& r) {
  // A number in range (number()), and only its neutral value unless `holds` anyway.
  auto number_is = [&](const char* key, double neutral, double lo, double hi, const char* range,
                       bool holds = false) -> std::optional<ApiError> {
    double v = neutral;
    if (auto e = number(j, key, v, lo, hi, range)) return e;
    if (v == neutral || holds) return std::nullopt;
    return bad(key, "is not supported by this server (only " + json(neutral).dump() + ")");
  };
  // OpenAI's ranges, and vLLM's for its extensions.
  if (auto e = number_is("frequency_penalty", 0, -2, 2, "between -2 and 2")) return e;
  if (auto e = number_is("presence_penalty", 0, -2, 2, "between -2 and 2")) return e;
  if (auto e = number_is("repetition_penalty", 1, 1e-9, 1e9, "positive")) return e;
  if (auto e = number_is("min_p", 0, 0, 1, "between 0 and 1")) return e;
  // min_tokens holds anyway where nothing can end a choice before max_tokens (ignore_eos and
  // no stops: genai-perf's way to fix the output length).
  if (auto e = number_is("min_tokens", 0, 0, 1e9, "a non-negative count", r.runs_to_max_tokens())) {
    return e;
  }
  if (auto it = j.find("best_of"); it != j.end() && !it->is_null()) {
    // best_of = n (1 by default) is what every request does: n samples, all returned.
    if (!it->is_number_integer() || it->get<int64_t>() != r.n) {
      return bad("best_of", "is not supported by this server (only equal to n)");
    }
  }
  if (auto it = j.find("logit_bias"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return bad("logit_bias", "must be an object");
    for (const auto& [token, bias] : it->items()) {
      if (!bias.is_number()) return bad("logit_bias", "biases must be numbers");
      if (bias.get<double>() != 0) {
        return bad("logit_bias", "is not supported by this server (only biases of 0)");
      }
    }
  }
  if (auto it = j.find("response_format"); it != j.end() && !it->is_null()) {
    const auto type = it->is_object() ? it->find("type") : it->end();
    if (type == it->end() || !type->is_string()) {
      return bad("response_format", "must be an object with a \"type\"");
    }
    if (type->get_ref<const std::string&>() != "text") {
      return bad("response_format", "is not supported by this server (only {\"type\": \"text\"})");
    }
  }
  // vLLM's extensions that change what is generated or returned: refused unless null or at
  // their default (what this server does anyway).
  struct Neutral {
    const char* key;
    json value;  // besides null (absent), the neutral value; null: only null
    const char* only;
  };
  const Neutral neutral[] = {
      {"use_beam_search", false, "false"},
      {"truncate_prompt_tokens", nullptr, "null"},
      {"guided_json", nullptr, "null"},
      {"guided_regex", nullptr, "null"},
      {"guided_choice", nullptr, "null"},
      {"guided_grammar", nullptr, "null"},
      {"structured_outputs", nullptr, "null"},
      {"length_penalty", 1.0, "1"},
      {"prompt_logprobs", nullptr, "null"},
      {"allowed_token_ids", nullptr, "null"},
      // An empty list of banned words or processors, or of extra arguments, asks for nothing.
      {"bad_words", json::array(), "null or []"},
      {"logits_processors", json::array(), "null or []"},
      {"vllm_xargs", json::object(), "null or {}"},
      {"chat_template", nullptr, "null: the model's own template is used"},
      {"documents", nullptr, "null"},
  };
  for (const Neutral& n : neutral) {
    auto it = j.find(n.key);
    if (it == j.end() || it->is_null() || (!n.value.is_null() && *it == n.value)) continue;
    return bad(n.key, std::string("is not supported by this server (only ") + n.only + ")");
  }
  if (auto it = j.find("tool_choice"); it != j.end() && !it->is_null()) {
    // Tools reach the model through its chat template and nothing constrains what it generates;
    // a reply never has tool_calls (the model's text is the content): "auto" and "none" are what
    // happens, "required" or a named function cannot be held to.
    const std::string choice = it->is_string() ? it->get<std::string>() : "";
    if (choice != "auto" && choice != "none") {
      return bad("tool_choice",
                 "is not supported by this server (only \"auto\" or \"none\": nothing makes "
                 "the model call a tool)");
    }
  }
  return std::nullopt;
}

// Reads `j`, moving the prompt text out of it.
std::optional<ApiError> parse_fields(Endpoint endpoint, json& j, const ApiLimits& limits,
                                     ParseMode mode, const ChatTemplateFor& template_for,
                                     OpenAiRequest& r) {
  if (!j.contains("model") || !j["model"].is_string()) return bad("model", "must be a string");
  r.model = j["model"].get<std::string>();
  if (endpoint == Endpoint::kCompletions) {
    if (!j.contains("prompt")) return bad("prompt", "is required");
    if (auto e = prompts_from(j["prompt"], limits, mode, r)) return e;
  } else {
    if (!j.contains("messages")) return bad("messages", "is required");
    // Extensions (vLLM): the prompt ends with the assistant's header unless the client asks
    // otherwise (to score or continue a conversation as it stands); continuing the last
    // message itself is not supported.
    bool generation_prompt = true;
    if (auto it = j.find("add_generation_prompt"); it != j.end() && !it->is_null()) {
      if (it->is_boolean()) {
        generation_prompt = it->get<bool>();
      } else if (mode == ParseMode::kFull) {
        return bad("add_generation_prompt", "must be a boolean");
      }
    }
    if (auto it = j.find("continue_final_message"); mode == ParseMode::kFull && it != j.end() &&
                                                    !it->is_null() &&
                                                    !(it->is_boolean() && !it->get<bool>())) {
      return bad("continue_final_message", "is not supported by this server");
    }
    if (const auto tmpl = template_for ? template_for(r.model) : nullptr) {
      auto field = [&](const char* key) -> const json* {
        auto it = j.find(key);
        return it == j.end() ? nullptr : &*it;
      };
      Result<RenderedPrompt> rendered =
          tmpl->render(j["messages"], generation_prompt,
                       ChatTemplateInputs{field("tools"), field("chat_template_kwargs")});
      if (!rendered.ok()) {
        const std::string& m = rendered.error().message;
        const char* param = m.starts_with("tools")                  ? "tools"
                            : m.starts_with("chat_template_kwargs") ? "chat_template_kwargs"
                                                                    : "messages";
        return ApiError{400, m, param};
      }
      r.prompts.push_back(std::move(rendered->text));
      r.literal.push_back(std::move(rendered->literal));
    } else {
      Result<std::string> rendered = render_chat(j["messages"], generation_prompt);
      std::optional<std::string> fallback;
      if (!rendered.ok() && mode == ParseMode::kRouting) {
        fallback = routing_bytes_of_messages(j["messages"]);
      }
      if (!rendered.ok() && !fallback) return ApiError{400, rendered.error().message, "messages"};
      // The canonical rendering has no place for tools: a replica without the model's template
      // refuses them rather than drop them (a router only hashes, and lets the replica say so).
      if (mode == ParseMode::kFull && j.contains("tools") && !j["tools"].is_null() &&
          !(j["tools"].is_array() && j["tools"].empty())) {  // an empty list: no tools
        return bad("tools", "this model has no chat template to describe tools with");
      }
      r.prompts.push_back(rendered.ok() ? std::move(rendered).value() : std::move(*fallback));
      // The canonical rendering writes no model's special tokens (its markers are text, and a
      // message cannot spell them: chat_render.h): all of it is plain text to a model's tokenizer,
      // so "</s>" or "<|eot_id|>" in a message stays text for a model without a template too.
      r.literal.push_back({TextSpan{0, r.prompts.back().size()}});
    }
  }
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    if (r.prompts[i].empty()) return bad("prompt", "must not be empty");
  }
  if (mode == ParseMode::kRouting) {
    routing_fields(j, limits, r);
    return std::nullopt;
  }
  if (auto e =
          number(j, "n", r.n, 1, limits.max_n, ("1 to " + std::to_string(limits.max_n)).c_str()))
    return e;
  // Chat's max_completion_tokens where set (a client that writes every field may send it null
  // beside a max_tokens).
  const auto completion_max = j.find("max_completion_tokens");
  const char* max_key = endpoint == Endpoint::kChatCompletions && completion_max != j.end() &&
                                !completion_max->is_null()
                            ? "max_completion_tokens"
                            : "max_tokens";
  if (auto e = number(j, max_key, r.max_tokens, 1, limits.max_tokens,
                      ("1 to " + std::to_string(limits.max_tokens)).c_str()))
    return e;
  r.max_tokens_given = j.contains(max_key) && !j[max_key].is_null();
  if (auto e = number(j, "temperature", r.temperature, 0, 2, "between 0 and 2")) return e;
  if (auto e = number(j, "top_p", r.top_p, 1e-9, 1, "in (0, 1]")) return e;
  if (auto e = number(j, "top_k", r.top_k, -1, 1 << 20, "-1, 0 (off) or a positive count"))
    return e;
  if (r.top_k && *r.top_k < 0) r.top_k = 0;
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer()) return bad("seed", "must be an integer");
    r.seed =
        it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  }
  if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > limits.max_stop_token_ids) {
      return bad("stop_token_ids", "must be an array of at most " +
                                       std::to_string(limits.max_stop_token_ids) + " token ids");
    }
    for (const json& t : *it) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        return bad("stop_token_ids", "token ids must be integers 0 to 2^31 - 1");
      }
      r.stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      r.stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= limits.max_stop) {
      for (const json& s : *it) {
        if (!s.is_string()) return bad("stop", "must be a string or an array of strings");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return bad("stop", "must be a string or an array of at most " +
                             std::to_string(limits.max_stop) + " strings");
    }
    for (const std::string& s : r.stop) {
      if (s.empty() || s.size() > limits.max_stop_bytes) {
        return bad("stop",
                   "stop strings must be 1 to " + std::to_string(limits.max_stop_bytes) + " bytes");
      }
    }
  }
  auto flag = [&](const char* key, bool& out) -> std::optional<ApiError> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) return bad(key, "must be a boolean");
    out = it->get<bool>();
    return std::nullopt;
  };
  if (auto e = flag("stream", r.stream)) return e;
  if (auto e = flag("ignore_eos", r.ignore_eos)) return e;
  if (auto e = flag("include_stop_str_in_output", r.include_stop_str_in_output)) return e;
  // vLLM's add_special_tokens: a completion's prompt gets the tokenizer's special tokens (BOS)
  // unless false; a chat's template writes them itself, so there only false (vLLM's default).
  r.add_special_tokens = endpoint == Endpoint::kCompletions;
  if (auto e = flag("add_special_tokens", r.add_special_tokens)) return e;
  if (endpoint == Endpoint::kChatCompletions && r.add_special_tokens) {
    return bad("add_special_tokens",
               "is not supported for chat (only false: the chat template writes the special "
               "tokens)");
  }
  if (auto e = flag("skip_special_tokens", r.skip_special_tokens)) return e;
  // Spaces are never put between special tokens' texts here: any value is what happens (it
  // matters only to vLLM's slow tokenizers).
  bool spaces = true;
  if (auto e = flag("spaces_between_special_tokens", spaces)) return e;
  if (auto it = j.find("stream_options"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return bad("stream_options", "must be an object");
    // As OpenAI and vLLM: it configures a stream, and would otherwise be ignored.
    if (!r.stream) return bad("stream_options", "is only allowed with \"stream\": true");
    if (auto u = it->find("include_usage"); u != it->end()) {
      if (!u->is_boolean()) return bad("stream_options.include_usage", "must be a boolean");
      r.include_usage = u->get<bool>();
    }
    // vLLM's usage in every chunk: not served, so refused rather than ignored (false is what
    // happens anyway).
    if (auto u = it->find("continuous_usage_stats"); u != it->end() && !u->is_null()) {
      if (!u->is_boolean()) {
        return bad("stream_options.continuous_usage_stats", "must be a boolean");
      }
      if (u->get<bool>()) {
        return bad("stream_options.continuous_usage_stats",
                   "is not supported: usage comes once, in the stream's last chunk "
                   "(stream_options.include_usage)");
      }
    }
  }
  auto text = [&](const char* key, std::string& out, size_t max) -> std::optional<ApiError> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) return bad(key, "must be a string");
    if (it->get_ref<const std::string&>().size() > max) {
      return bad(key, "must be at most " + std::to_string(max) + " bytes");
    }
    out = it->get<std::string>();
    return std::nullopt;
  };
  if (auto e = text("cache_salt", r.cache_salt, 1024)) return e;
  if (auto e = text("user", r.user, 1024)) return e;
  std::string group;
  if (auto e = text("group", group, 256)) return e;
  if (j.contains("group") && !j["group"].is_null()) r.group = group;
  if (j.contains("group_size") && !j["group_size"].is_null()) {
    if (auto e = number(j, "group_size", r.group_size, 1, 4096, "1 to 4096")) return e;
    if (!r.group) return bad("group_size", "needs a group id (\"group\")");
  }
  if (auto e = flag("return_token_ids", r.return_token_ids)) return e;
  if (auto e = flag("return_tokens_as_token_ids", r.return_tokens_as_token_ids)) return e;
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = number(j, "logprobs", r.logprobs, 0, kMaxLogprobs, "an integer 0 to 20")) return e;
  } else {
    bool want = false;
    if (auto e = flag("logprobs", want)) return e;
    int32_t top = 0;
    if (auto e = number(j, "top_logprobs", top, 0, kMaxLogprobs, "an integer 0 to 20")) return e;
    if (!want && j.contains("top_logprobs") && !j["top_logprobs"].is_null()) {
      return bad("top_logprobs", "needs \"logprobs\": true");
    }
    if (want) r.logprobs = top;
  }
  for (const char* unsupported : {"tools", "functions", "echo", "suffix"}) {
    // Chat requests give tools to the model's template (above).
    if (endpoint == Endpoint::kChatCompletions && std::string_view(unsupported) == "tools")
      continue;
    auto it = j.find(unsupported);
    if (it != j.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()) &&
        !(it->is_string() && it->get_ref<const std::string&>().empty())) {
      return bad(unsupported, "is not supported by this server");
    }
  }
  return unsupported_sampling(j, r);
}

// simdjson's document as the nlohmann one the field checks read: numbers as nlohmann types them
// (a non-negative integer unsigned, a negative one signed, anything with a fraction or exponent a
// double), objects in the client's key order with a repeated key's last value in its first place.
json to_json(simdjson::dom::element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::ARRAY: {
      json a = json::array();
      const simdjson::dom::array arr(e);
      for (simdjson::dom::element x : arr)
        a.push_back(to_json(x));
      return a;
    }
    case simdjson::dom::element_type::OBJECT: {
      json o = json::object();
      const simdjson::dom::object obj(e);
      for (simdjson::dom::key_value_pair kv : obj)
        o[std::string(kv.key)] = to_json(kv.value);
      return o;
    }
    case simdjson::dom::element_type::INT64: {
      const int64_t v = e.get_int64().value_unsafe();
      return v >= 0 ? json(static_cast<uint64_t>(v)) : json(v);
    }
    case simdjson::dom::element_type::UINT64:
      return json(e.get_uint64().value_unsafe());
    case simdjson::dom::element_type::DOUBLE:
      return json(e.get_double().value_unsafe());
    case simdjson::dom::element_type::STRING:
      return json(std::string(e.get_string().value_unsafe()));
    case simdjson::dom::element_type::BOOL:
      return json(e.get_bool().value_unsafe());
    case simdjson::dom::element_type::NULL_VALUE:
      return json(nullptr);
  }
  return json(nullptr);
}

// The body as a JSON document, through simdjson (it validates UTF-8 and the grammar at gigabytes
// per second: a 400 KB prompt costs a small part of what nlohmann's lexer takes, which reads it a
// byte at a time). nullopt when simdjson refuses it: nlohmann then parses it again for its
// verdict and the byte offset of the error (and takes what simdjson cannot hold, such as an
// integer past 64 bits), so the accepted documents and the messages are nlohmann's.
std::optional<json> parse_fast(JsonBody body) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element root;
  const bool padded = body.slack >= simdjson::SIMDJSON_PADDING;  // else simdjson copies it
  if (parser.parse(body.bytes.data(), body.bytes.size(), !padded).get(root) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  return to_json(root);
}

}  // namespace

std::variant<OpenAiRequest, ApiError> parse_openai_request(Endpoint endpoint, JsonBody json_body,
                                                           const ApiLimits& limits,
                                                           const ChatTemplateFor& template_for,
                                                           ParseMode mode) {
  const std::string_view body = json_body.bytes;
  // nlohmann's lexer takes a NUL byte for the end of input, so "{...}\0garbage" would parse. A NUL
  // is never valid in JSON text (raw or inside a string), so any NUL refuses the body.
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    return ApiError{400, "invalid JSON in the body at byte " + std::to_string(nul + 1), ""};
  }
  json j;
  try {
    if (std::optional<json> fast = parse_fast(json_body)) {
      j = std::move(*fast);
    } else {
      j = json::parse(body);
    }
  } catch (const json::parse_error& e) {
    // nlohmann's message may quote the offending bytes (maybe not UTF-8) after "; last read":
    // keep kind and offset, and its reason before that quote ("invalid string: surrogate
    // U+D800..U+DBFF must be followed by U+DC00..U+DFFF").
    const std::string_view what = e.what();
    const bool utf8 = what.find("UTF-8") != std::string_view::npos;
    std::string reason;
    if (const size_t quote = what.find("; last read"); quote != std::string_view::npos) {
      const size_t dash = what.rfind(" - ", quote);
      if (dash != std::string_view::npos)
        reason = ": " + std::string(what.substr(dash + 3, quote - dash - 3));
    }
    return ApiError{400,
                    std::string(utf8 ? "invalid UTF-8" : "invalid JSON") + " in the body at byte " +
                        std::to_string(e.byte) + reason,
                    ""};
  } catch (const json::exception& e) {
    return ApiError{400, "invalid JSON body", ""};
  }
  if (!j.is_object()) return bad("", "the body must be a JSON object");
  OpenAiRequest r;
  r.endpoint = endpoint;
  try {
    if (auto e = parse_fields(endpoint, j, limits, mode, template_for, r)) return *e;
  } catch (const json::exception& e) {
    return bad("", std::string("malformed request: ") + e.what());
  }
  return r;
}

bool valid_weight_version(std::string_view v) {
  return is_plain_label(v);
}

}  // namespace kvc
