// Server-sent events (text/event-stream): a writer helper for responders and an incremental parser
// for the router, which relays replica streams and follows their KV-event feeds.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kvc::http {

struct SseEvent {
  std::string event;  // "" when the event had no "event:" field (a "message")
  std::string data;   // the data lines joined with '\n'
  std::string id;     // the last event id seen on the stream so far ("" if none)
};

// One event on the wire: "event: E\n" (if not empty), one "data: " line per line of data, "\n".
std::string sse_event(std::string_view data, std::string_view event = {});

// `headers` and those an event stream goes with beside its content type: not cached, and not
// buffered by a proxy in front (nginx's X-Accel-Buffering), so that each event reaches the
// client when it is sent.
std::vector<std::pair<std::string, std::string>> event_stream_headers(
    std::vector<std::pair<std::string, std::string>> headers = {});

// Incremental parser. Accepts LF, CRLF and CR line ends (also split across feeds), skips comment
// lines (':'), ignores unknown fields and "retry", and dispatches an event on a blank line when it
// has data (as the HTML standard says). What it holds, the event being built plus the line being
// read, growing past max_event_bytes is an error, however the stream is split into feeds; the
// parser then stays failed.
class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 1 << 20) : max_event_bytes_(max_event_bytes) {}

  // Appends bytes; returns the events they complete, in order.
  Result<std::vector<SseEvent>> feed(std::string_view bytes);

  // Bytes held for an unfinished line or event.
  size_t pending_bytes() const { return line_.size() + data_.size() + event_.size(); }

 private:
  void process_line(std::string_view line, std::vector<SseEvent>& out);

  const size_t max_event_bytes_;
  std::string line_;   // the unfinished line
  std::string data_;   // data of the event being built, each line followed by '\n'
  std::string event_;  // its "event" field
  std::string last_id_;
  bool skip_lf_ = false;  // the previous feed ended with CR: a leading LF belongs to it
  bool at_start_ = true;  // a UTF-8 BOM at the very start is skipped
  std::string failed_;    // non-empty once the limit was exceeded
};

}  // namespace kvc::http
