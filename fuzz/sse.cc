// SseParser on arbitrary streams. Byte 0 seeds the chunking, the rest is the stream. Properties:
// - feeding the stream in chunks (split anywhere, even inside CRLF or the BOM) gives the same
//   events as feeding it whole, and fails exactly when feeding it whole fails;
// - the parser holds no more than its limit;
// - sse_event(data, event) parses back to (event, data) when neither contains CR (and the event
//   no LF): the writer's one-data-line-per-line framing.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "http/sse.h"

namespace {

constexpr size_t kMaxEventBytes = 512;

bool same(const std::vector<kvc::http::SseEvent>& a, const std::vector<kvc::http::SseEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].event != b[i].event || a[i].data != b[i].data || a[i].id != b[i].id) return false;
  }
  return true;
}

void check_round_trip(std::string data, std::string event) {
  std::erase(data, '\r');
  std::erase(event, '\r');
  std::erase(event, '\n');
  kvc::http::SseParser parser(1 << 20);
  auto events = parser.feed(kvc::http::sse_event(data, event));
  FUZZ_CHECK(events.ok());
  FUZZ_CHECK(events->size() == 1);
  FUZZ_CHECK((*events)[0].data == data);
  FUZZ_CHECK((*events)[0].event == event);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint32_t seed = data[0];
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);

  kvc::http::SseParser whole_parser(kMaxEventBytes);
  auto whole = whole_parser.feed(stream);

  kvc::http::SseParser chunk_parser(kMaxEventBytes);
  std::vector<kvc::http::SseEvent> chunked;
  bool chunked_failed = false;
  for (size_t pos = 0; pos < stream.size();) {
    seed = seed * 1103515245u + 12345u;
    const size_t len = std::min<size_t>(1 + (seed >> 16) % 7, stream.size() - pos);
    auto events = chunk_parser.feed(stream.substr(pos, len));
    pos += len;
    if (!events.ok()) {
      chunked_failed = true;
      break;
    }
    FUZZ_CHECK(chunk_parser.pending_bytes() <= kMaxEventBytes);
    chunked.insert(chunked.end(), events->begin(), events->end());
  }
  FUZZ_CHECK(whole.ok() == !chunked_failed);
  if (whole.ok()) {
    FUZZ_CHECK(same(*whole, chunked));
    FUZZ_CHECK(whole_parser.pending_bytes() == chunk_parser.pending_bytes());
  }

  const size_t split = stream.size() / 2;
  check_round_trip(std::string(stream.substr(0, split)), std::string(stream.substr(split)));
  return 0;
}
