#include "api/chat_render.h"

#include <array>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/utf8.h"

namespace kvc {
namespace {

// Ordered like the request parser's JSON (api/openai_request.cc), so nothing is converted.
using json = nlohmann::ordered_json;

// How every marker of the format begins ("<|start|>", "<|end|>").
constexpr std::string_view kMarkerOpen = "<|";

constexpr std::array<std::string_view, 5> kRoles = {"system", "developer", "user", "assistant",
                                                    "tool"};

// Error messages echo client input and end up inside JSON error bodies: keep them short and valid
// UTF-8 (invalid bytes become U+FFFD), whatever the caller put into the json.
constexpr size_t kMaxEchoBytes = 64;

std::string printable(std::string_view text) {
  return valid_utf8(text.substr(0, kMaxEchoBytes));
}

std::string indexed(std::string_view field, size_t i) {
  return std::string(field) + "[" + std::to_string(i) + "]";
}

Error field_error(std::string_view field, std::string_view what) {
  return Error{std::string(field) + ": " + std::string(what)};
}

// nullptr when absent. Precondition: object.is_object().
const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

bool is_known_role(std::string_view role) {
  for (const std::string_view known : kRoles) {
    if (role == known) return true;
  }
  return false;
}

// Null content is allowed where OpenAI allows it: an assistant turn that only called tools, and a
// tool result with nothing to say.
bool may_have_null_content(std::string_view role) {
  return role == "assistant" || role == "tool";
}

// The text of one content part. A missing "type" is read as "text" (the only kind there is).
Status append_part(const json& part, std::string_view field, std::string& out) {
  if (!part.is_object()) return field_error(field, "expected an object");
  if (const json* type = member(part, "type"); type != nullptr) {
    if (!type->is_string()) return field_error(std::string(field) + ".type", "expected a string");
    const std::string& name = type->get_ref<const std::string&>();
    if (name != "text") {
      return field_error(std::string(field) + ".type",
                         "only text parts are supported (got '" + printable(name) + "')");
    }
  }
  const json* text = member(part, "text");
  if (text == nullptr || !text->is_string()) {
    return field_error(std::string(field) + ".text", "expected a string");
  }
  out += text->get_ref<const std::string&>();
  return Status::Ok();
}

// Every marker starts with "<|", so content that holds none can neither close its message nor open
// another. "<|" becomes "<||" (and so "<||" becomes "<|||"): the first "<|end|>\n" after a header
// always ends the message, and the content is recovered by turning each "<||" back into "<|".
void append_escaped(std::string_view text, std::string& out) {
  for (size_t at = 0;;) {
    const size_t marker = text.find(kMarkerOpen, at);
    if (marker == text.npos) {
      out.append(text.substr(at));
      return;
    }
    out.append(text.substr(at, marker + kMarkerOpen.size() - at));
    out += '|';
    at = marker + kMarkerOpen.size();
  }
}

// Parts concatenate with no separator, so "ab" and [{"text":"a"},{"text":"b"}] are the same prompt;
// they are escaped once joined ("<" and "|end|>" join into a marker).
Status append_content(const json& message, std::string_view role, std::string_view field,
                      std::string& out) {
  const std::string content_field = std::string(field) + ".content";
  const json* content = member(message, "content");
  if (content == nullptr) return field_error(content_field, "missing");
  if (content->is_string()) {
    append_escaped(content->get_ref<const std::string&>(), out);
    return Status::Ok();
  }
  if (content->is_null()) {
    if (may_have_null_content(role)) return Status::Ok();
    return field_error(content_field, "must not be null for role '" + std::string(role) + "'");
  }
  if (!content->is_array()) {
    return field_error(content_field, "expected a string, an array of text parts, or null");
  }
  std::string text;
  for (size_t i = 0; i < content->size(); ++i) {
    if (Status s = append_part((*content)[i], indexed(content_field, i), text); !s) return s;
  }
  append_escaped(text, out);
  return Status::Ok();
}

// The name shares the header line with the role, so it must not end the line or open a marker:
// such a name is refused (400) rather than escaped, since no real name needs either.
Status append_name(const json& message, std::string_view field, std::string& out) {
  const json* name = member(message, "name");
  if (name == nullptr) return Status::Ok();
  const std::string name_field = std::string(field) + ".name";
  if (!name->is_string()) return field_error(name_field, "expected a string");
  const std::string& text = name->get_ref<const std::string&>();
  if (text.find('\n') != text.npos || text.find(kMarkerOpen) != text.npos) {
    return field_error(name_field, "must not contain a newline or '<|'");
  }
  out += " name=";
  out += text;
  return Status::Ok();
}

Status append_message(const json& message, std::string_view field, std::string& out) {
  if (!message.is_object()) return field_error(field, "expected an object");
  const std::string role_field = std::string(field) + ".role";
  const json* role = member(message, "role");
  if (role == nullptr) return field_error(role_field, "missing");
  if (!role->is_string()) return field_error(role_field, "expected a string");
  const std::string& role_name = role->get_ref<const std::string&>();
  if (!is_known_role(role_name)) {
    return field_error(role_field, "unknown role '" + printable(role_name) +
                                       "' (expected system, developer, user, assistant or tool)");
  }
  out += "<|start|>";
  out += role_name;
  if (Status s = append_name(message, field, out); !s) return s;
  out += '\n';
  if (Status s = append_content(message, role_name, field, out); !s) return s;
  out += "<|end|>\n";
  return Status::Ok();
}

}  // namespace

Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                bool add_generation_prompt) {
  if (!messages.is_array()) return field_error("messages", "expected an array");
  if (messages.empty()) return field_error("messages", "must not be empty");
  std::string out;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (Status s = append_message(messages[i], indexed("messages", i), out); !s) {
      return Error{s.message()};
    }
  }
  if (add_generation_prompt) out += kChatGenerationPrompt;
  return out;
}

}  // namespace kvc
