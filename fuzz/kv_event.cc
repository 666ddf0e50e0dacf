// decode_kv_event_batch on arbitrary text (the /v1/kv_events SSE data a router receives from a
// replica). Properties: never throws; a decoded batch respects the limits (a work announcement's
// too: seq from 1, tokens, sequences and route within theirs, as the router adds them up) and
// survives encode -> decode unchanged; an error message is valid UTF-8.
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "prefix_index/kv_event.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Small limits, so that inputs of a few KB can reach them.
  kvc::KvEventLimits limits;
  limits.max_hashes_per_event = 8;
  limits.max_events_per_batch = 8;
  limits.max_text_bytes = 2048;
  limits.max_route_bytes = 16;  // KvWork's: 256 bytes, 10^12 tokens, 2^20 sequences by default
  limits.max_work_tokens = 1'000'000;
  limits.max_work_sequences = 1000;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvc::Result<kvc::KvEventBatch> batch = kvc::decode_kv_event_batch(text, limits);
  if (!batch.ok()) {
    try {
      (void)nlohmann::json(batch.error().message).dump();
    } catch (const nlohmann::json::exception&) {
      FUZZ_CHECK(!"error message is not valid UTF-8");
    }
    return 0;
  }
  FUZZ_CHECK(size <= limits.max_text_bytes);
  FUZZ_CHECK(batch->events.size() <= limits.max_events_per_batch);
  for (const kvc::KvEvent& e : batch->events) {
    if (const auto* s = std::get_if<kvc::KvStored>(&e))
      FUZZ_CHECK(s->hashes.size() <= limits.max_hashes_per_event);
    if (const auto* r = std::get_if<kvc::KvRemoved>(&e))
      FUZZ_CHECK(r->hashes.size() <= limits.max_hashes_per_event);
    if (const auto* q = std::get_if<kvc::KvQueued>(&e))
      FUZZ_CHECK(q->hashes.size() <= limits.max_hashes_per_event);
    if (const auto* w = std::get_if<kvc::KvWork>(&e)) {
      FUZZ_CHECK(w->seq >= 1);
      FUZZ_CHECK(w->tokens >= 0 && w->tokens <= limits.max_work_tokens);
      FUZZ_CHECK(w->sequences >= 0 && w->sequences <= limits.max_work_sequences);
      FUZZ_CHECK(w->route.size() <= limits.max_route_bytes);
    }
  }
  const std::string encoded = kvc::encode_kv_event_batch(*batch);
  kvc::Result<kvc::KvEventBatch> again = kvc::decode_kv_event_batch(encoded);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(*again == *batch);
  // A lone event decodes the same as inside a batch.
  const nlohmann::json j = nlohmann::json::parse(encoded);
  for (size_t i = 0; i < batch->events.size(); ++i) {
    kvc::Result<kvc::KvEvent> one = kvc::decode_kv_event(j["events"][i]);
    FUZZ_CHECK(one.ok() && *one == batch->events[i]);
  }
  return 0;
}
