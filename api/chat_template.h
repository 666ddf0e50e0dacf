// A model's own chat template (tokenizer_config.json's "chat_template", Jinja), rendered as
// Hugging Face's apply_chat_template renders it: variables messages, bos_token, eos_token,
// add_generation_prompt, and the request's tools and chat_template_kwargs (enable_thinking...). The
// replica renders with it and publishes it in /v1/info; routers render the same bytes to hash
// (DESIGN.md, "Block hashing"). Models without a template keep the canonical rendering
// (chat_render.h).
//
// Every string taken from the request's messages is the client's text: the rendering reports
// where it landed (`literal`), and the replica's tokenizer reads no special token there, so a
// message holding "<|eot_id|>" cannot forge a turn.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "api/jinja.h"
#include "base/status.h"
#include "base/text_span.h"

namespace kvc {

// Template variables from the request besides its messages, as apply_chat_template passes them:
// `tools` (an array of tool objects) and each entry of `chat_template_kwargs` (an object, e.g.
// {"enable_thinking": false}). Null: absent. Ordered JSON: a template's tojson writes the keys in
// the client's order, as Python's json.dumps does.
struct ChatTemplateInputs {
  const nlohmann::ordered_json* tools = nullptr;
  const nlohmann::ordered_json* kwargs = nullptr;
};

struct RenderedPrompt {
  std::string text;
  std::vector<TextSpan> literal;  // sorted, disjoint: the client's text
};

class ChatTemplate {
 public:
  // The error names the line of a template that does not parse.
  static Result<ChatTemplate> compile(std::string source, std::string bos_token,
                                      std::string eos_token);

  // messages: a JSON array of {"role": string, "content": string | [{"type":"text","text":...}]
  // | null, ...}; other fields (name, tool_calls, reasoning_content) reach the template as they
  // are, keys in the order given. Text parts are joined with "\n". Errors name the field, or
  // quote the template's raise_exception. Every string from messages and inputs is the client's.
  Result<RenderedPrompt> render(const nlohmann::ordered_json& messages,
                                bool add_generation_prompt = true,
                                ChatTemplateInputs inputs = {}) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  // {"template": ..., "bos_token": ..., "eos_token": ...}: how /v1/info publishes it.
  nlohmann::json to_json() const;
  static Result<ChatTemplate> from_json(const nlohmann::json& j);

 private:
  std::string source_, bos_, eos_;
  jinja::Template template_;
};

}  // namespace kvc
