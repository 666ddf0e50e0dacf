#include "api/chat_template.h"

#include <nlohmann/json.hpp>

namespace kvc {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// The message as the template sees it: content parts joined into one string.
Result<ordered_json> normalize_message(const ordered_json& m, size_t i) {
  const std::string field = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) return Error{field + ": expected an object"};
  const auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return Error{field + ".role: expected a string"};
  ordered_json out = m;
  const auto content = m.find("content");
  if (content == m.end()) return Error{field + ".content: missing"};
  if (content->is_array()) {
    std::string text;
    for (size_t k = 0; k < content->size(); ++k) {
      const ordered_json& part = (*content)[k];
      const std::string where = field + ".content[" + std::to_string(k) + "]";
      if (!part.is_object()) return Error{where + ": expected an object"};
      if (part.contains("type") && part["type"] != "text")
        return Error{where + ".type: only text parts are supported"};
      if (!part.contains("text") || !part["text"].is_string())
        return Error{where + ".text: expected a string"};
      if (k > 0) text += '\n';
      text += part["text"].get<std::string>();
    }
    out["content"] = std::move(text);
  } else if (!content->is_string() && !content->is_null()) {
    return Error{field + ".content: expected a string, an array of text parts, or null"};
  }
  // An assistant's tool calls carry their arguments as a JSON string (OpenAI's shape); the
  // templates render them with `tojson` as objects (Llama 3.1's "parameters": {...}), so they
  // get the parsed object, as vLLM and transformers give them. A string that is not a JSON
  // object stays as it is.
  if (auto calls = out.find("tool_calls"); calls != out.end() && calls->is_array()) {
    for (ordered_json& call : *calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      ordered_json& fn = call["function"];
      if (auto args = fn.find("arguments"); args != fn.end() && args->is_string()) {
        ordered_json parsed = ordered_json::parse(args->get<std::string>(), nullptr, false);
        if (parsed.is_object()) *args = std::move(parsed);
      }
    }
  }
  return out;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::compile(std::string source, std::string bos_token,
                                           std::string eos_token) {
  auto t = jinja::Template::parse(source);
  if (!t.ok()) return t.error();
  ChatTemplate c;
  c.source_ = std::move(source);
  c.bos_ = std::move(bos_token);
  c.eos_ = std::move(eos_token);
  c.template_ = std::move(*t);
  return c;
}

Result<RenderedPrompt> ChatTemplate::render(const ordered_json& messages,
                                            bool add_generation_prompt,
                                            ChatTemplateInputs inputs) const {
  if (!messages.is_array()) return Error{"messages: expected an array"};
  if (messages.empty()) return Error{"messages: must not be empty"};
  ordered_json normalized = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    auto m = normalize_message(messages[i], i);
    if (!m.ok()) return m.error();
    normalized.push_back(std::move(*m));
  }
  std::vector<std::pair<std::string, jinja::Value>> variables = {
      {"messages", jinja::Value::from_json(normalized, /*literal=*/true)},
      {"bos_token", jinja::Value::string(bos_)},
      {"eos_token", jinja::Value::string(eos_)},
      {"add_generation_prompt", jinja::Value::boolean(add_generation_prompt)},
  };
  if (inputs.tools != nullptr && !inputs.tools->is_null()) {
    if (!inputs.tools->is_array()) return Error{"tools: expected an array"};
    for (size_t i = 0; i < inputs.tools->size(); ++i) {
      if (!(*inputs.tools)[i].is_object()) {
        return Error{"tools[" + std::to_string(i) + "]: expected an object"};
      }
    }
    variables.emplace_back("tools", jinja::Value::from_json(*inputs.tools, /*literal=*/true));
  }
  if (inputs.kwargs != nullptr && !inputs.kwargs->is_null()) {
    if (!inputs.kwargs->is_object()) return Error{"chat_template_kwargs: expected an object"};
    for (auto it = inputs.kwargs->begin(); it != inputs.kwargs->end(); ++it) {
      for (const auto& [name, value] : variables) {
        if (name == it.key()) {
          return Error{"chat_template_kwargs." + it.key() + ": a name the server sets itself"};
        }
      }
      variables.emplace_back(it.key(), jinja::Value::from_json(it.value(), /*literal=*/true));
    }
  }
  auto text = template_.render(variables);
  if (!text.ok()) return text.error();
  RenderedPrompt out;
  out.text = std::move(text->s);
  const std::string& flags = text->literal;
  for (size_t at = 0; at < flags.size();) {
    if (flags[at] != '\1') {
      ++at;
      continue;
    }
    size_t end = at;
    while (end < flags.size() && flags[end] == '\1')
      ++end;
    out.literal.push_back({at, end});
    at = end;
  }
  return out;
}

json ChatTemplate::to_json() const {
  return {{"template", source_}, {"bos_token", bos_}, {"eos_token", eos_}};
}

Result<ChatTemplate> ChatTemplate::from_json(const json& j) {
  if (!j.is_object() || !j.contains("template") || !j["template"].is_string())
    return Error{"chat_template: expected {\"template\": string, ...}"};
  auto text = [&](const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  return compile(j["template"].get<std::string>(), text("bos_token"), text("eos_token"));
}

}  // namespace kvc
