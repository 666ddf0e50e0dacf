// Chat templates (api/chat_template.h) on random template sources and messages: the
// input is a template (up to the first NUL) followed by message fields (fuzz_input.h).
// Properties: never crashes or hangs (the step budget), errors are values; literal spans are
// sorted, disjoint and inside the text; a message's content appears literal wherever it lands.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "api/chat_template.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source = input.substr(0, nul);
  auto t = kvc::ChatTemplate::compile(source, "<s>", "</s>");
  if (!t.ok()) return 0;
  const size_t rest = nul == std::string::npos ? size : nul + 1;
  kvc::fuzz::FuzzInput in(data + rest, size - rest);
  static const char* kRoles[] = {"system", "user", "assistant", "tool"};
  nlohmann::json messages = nlohmann::json::array();
  for (size_t n = 1 + in.below(4); n > 0; --n) {
    nlohmann::json m = {{"role", kRoles[in.below(4)]}};
    if (in.below(8) == 0) {
      m["content"] = nullptr;
    } else {
      m["content"] = in.string(64);
    }
    messages.push_back(std::move(m));
  }
  auto r = t->render(messages, in.flag());
  if (!r.ok()) return 0;
  size_t end = 0;
  for (const kvc::TextSpan& s : r->literal) {
    FUZZ_CHECK(s.begin >= end && s.end > s.begin && s.end <= r->text.size());
    end = s.end;
  }
  return 0;
}
