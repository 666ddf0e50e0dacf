// render_chat on random message lists decoded from the input (fuzz_input.h): roles known and
// unknown, names, content as a string, null, a list of parts or a wrong type. Properties:
// - never throws; an error message is valid UTF-8 (it is echoed inside a JSON error body);
// - the generation prompt is exactly appended;
// - every rendered prefix of the list is a byte prefix of the whole (turn k+1 extends turn k).
#include <algorithm>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "api/chat_render.h"
#include "fuzz/fuzz_input.h"

namespace {

using kvc::fuzz::FuzzInput;
using nlohmann::json;

json text_or_other(FuzzInput& in) {
  switch (in.below(8)) {
    case 0:
      return nullptr;
    case 1:
      return static_cast<int>(in.byte());
    case 2:
      return json::array();
    default:
      return in.string(64);
  }
}

json part(FuzzInput& in) {
  switch (in.below(8)) {
    case 0:
      return text_or_other(in);  // not an object
    case 1:
      return json{{"type", text_or_other(in)}, {"text", in.string(64)}};
    case 2:
      return json{{"type", "image_url"}, {"image_url", "x"}};
    case 3:
      return json{{"text", text_or_other(in)}};
    default:
      return json{{"type", "text"}, {"text", in.string(64)}};
  }
}

json message(FuzzInput& in) {
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool", "bot", ""};
  json m = json::object();
  switch (in.below(16)) {
    case 0:
      return text_or_other(in);  // not an object
    case 1:
      break;  // no role
    case 2:
      m["role"] = text_or_other(in);
      break;
    default:
      m["role"] = kRoles[in.below(std::size(kRoles))];
      break;
  }
  switch (in.below(8)) {
    case 0:
      m["name"] = text_or_other(in);
      break;
    case 1:
      m["name"] = in.string(32);
      break;
    default:
      break;
  }
  switch (in.below(8)) {
    case 0:
      break;  // no content
    case 1:
      m["content"] = nullptr;
      break;
    case 2:
      m["content"] = static_cast<int>(in.byte());
      break;
    case 3:
    case 4: {
      json parts = json::array();
      for (size_t n = in.below(4); n > 0; --n)
        parts.push_back(part(in));
      m["content"] = std::move(parts);
      break;
    }
    default:
      m["content"] = in.string();
      break;
  }
  return m;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  json messages = in.below(16) == 0 ? text_or_other(in) : json::array();
  if (messages.is_array()) {
    for (size_t n = in.below(8); n > 0 && !in.empty(); --n)
      messages.push_back(message(in));
  }

  kvc::Result<std::string> with_prompt = kvc::render_chat(messages, true);
  kvc::Result<std::string> without = kvc::render_chat(messages, false);
  FUZZ_CHECK(with_prompt.ok() == without.ok());
  if (!without.ok()) {
    FUZZ_CHECK(valid_utf8(without.error().message));
    FUZZ_CHECK(without.error().message == with_prompt.error().message);
    return 0;
  }
  FUZZ_CHECK(*with_prompt == *without + kvc::kChatGenerationPrompt);
  // Each turn extends the previous one.
  std::string previous;
  for (size_t k = 1; k < messages.size(); ++k) {
    json head(std::vector<json>(messages.begin(), messages.begin() + k));
    kvc::Result<std::string> r = kvc::render_chat(head, false);
    FUZZ_CHECK(r.ok());
    FUZZ_CHECK(r->starts_with(previous));
    FUZZ_CHECK(without->starts_with(*r));
    previous = *r;
  }
  return 0;
}
