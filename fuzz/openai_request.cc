// parse_openai_request on arbitrary bodies. Byte 0 picks the endpoint (even: completions, odd:
// chat); the rest is the body. Besides "never crashes, never throws", a request it accepts must
// satisfy the limits the servers rely on.
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "api/openai_request.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const kvc::Endpoint endpoint =
      data[0] % 2 == 0 ? kvc::Endpoint::kCompletions : kvc::Endpoint::kChatCompletions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const kvc::ApiLimits limits;
  auto parsed = kvc::parse_openai_request(endpoint, body, limits);
  if (const auto* error = std::get_if<kvc::ApiError>(&parsed)) {
    FUZZ_CHECK(error->status >= 400 && error->status < 600);
    FUZZ_CHECK(!error->message.empty());
    return 0;
  }
  const auto& r = std::get<kvc::OpenAiRequest>(parsed);
  FUZZ_CHECK(r.endpoint == endpoint);
  FUZZ_CHECK(!r.prompts.empty());
  for (const auto& p : r.prompts)
    FUZZ_CHECK(!p.empty());
  FUZZ_CHECK(r.n >= 1 && r.n <= limits.max_n);
  FUZZ_CHECK(r.max_tokens >= 1 && r.max_tokens <= limits.max_tokens);
  FUZZ_CHECK(r.temperature.value_or(1) >= 0 && r.temperature.value_or(1) <= 2);
  FUZZ_CHECK(r.top_p.value_or(1) > 0 && r.top_p.value_or(1) <= 1);
  FUZZ_CHECK(r.top_k.value_or(0) >= 0);
  FUZZ_CHECK(r.stop.size() <= limits.max_stop);
  return 0;
}
