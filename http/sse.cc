#include "http/sse.h"

namespace kvc::http {

std::vector<std::pair<std::string, std::string>> event_stream_headers(
    std::vector<std::pair<std::string, std::string>> headers) {
  headers.emplace_back("cache-control", "no-cache");
  headers.emplace_back("x-accel-buffering", "no");
  return headers;
}

std::string sse_event(std::string_view data, std::string_view event) {
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    out += event;
    out += '\n';
  }
  // one data line per line: a newline inside data must not end the field
  size_t start = 0;
  for (;;) {
    size_t nl = data.find('\n', start);
    out += "data: ";
    out += data.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    out += '\n';
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out += '\n';
  return out;
}

Result<std::vector<SseEvent>> SseParser::feed(std::string_view bytes) {
  if (!failed_.empty()) return Error{failed_};
  std::vector<SseEvent> out;
  if (at_start_ && !bytes.empty()) {
    // the BOM may itself arrive split; hold the first bytes until it can be decided
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    line_.append(bytes);
    bytes = {};
    if (line_.size() < kBom.size() && kBom.substr(0, line_.size()) == line_) return out;
    at_start_ = false;
    std::string head = std::move(line_);
    line_.clear();
    std::string_view rest = head;
    if (rest.substr(0, kBom.size()) == kBom) rest.remove_prefix(kBom.size());
    auto events = feed(rest);
    return events;
  }
  auto fail = [this]() -> Result<std::vector<SseEvent>> {
    failed_ = "server-sent event larger than " + std::to_string(max_event_bytes_) + " bytes";
    line_.clear();
    data_.clear();
    event_.clear();
    return Error{failed_};
  };
  size_t i = 0;
  if (skip_lf_ && !bytes.empty()) {
    if (bytes[0] == '\n') i = 1;
    skip_lf_ = false;
  }
  while (i < bytes.size()) {
    size_t end = bytes.find_first_of("\r\n", i);
    // One bound for everything held, checked as each line grows: the event so far plus the
    // line being read. Where the stream is split into feeds then never changes the outcome.
    if (end == std::string_view::npos) {
      if (pending_bytes() + (bytes.size() - i) > max_event_bytes_) return fail();
      line_.append(bytes.substr(i));
      break;
    }
    std::string_view line = bytes.substr(i, end - i);
    if (pending_bytes() + line.size() > max_event_bytes_) return fail();
    if (!line_.empty()) {
      line_.append(line);
      line = line_;
    }
    process_line(line, out);
    line_.clear();
    if (pending_bytes() > max_event_bytes_) return fail();
    i = end + 1;
    if (bytes[end] == '\r') {
      if (i < bytes.size()) {
        if (bytes[i] == '\n') ++i;
      } else {
        skip_lf_ = true;
      }
    }
  }
  if (pending_bytes() > max_event_bytes_) return fail();
  return out;
}

void SseParser::process_line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (!data_.empty()) {
      data_.pop_back();  // the '\n' after the last data line
      out.push_back(SseEvent{std::move(event_), std::move(data_), last_id_});
    }
    data_.clear();
    event_.clear();
    return;
  }
  if (line[0] == ':') return;  // comment (keep-alive pings)
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    data_.append(value);
    data_ += '\n';
  } else if (field == "event") {
    event_.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) last_id_.assign(value);
  }
}

}  // namespace kvc::http
