// HTTP/1.1 wire formatting shared by the server's responses and the client's requests. Internal to
// http/ (not part of the public API).
#pragma once

#include <mutex>
#include <string>
#include <string_view>

#include "http/server.h"

namespace kvc::http::wire {

// Header names/values from callers go onto the wire verbatim; one with CR, LF or NUL would split
// the message, so it is dropped.
bool header_is_safe(std::string_view name, std::string_view value);

bool iequals(std::string_view a, std::string_view b);

// "HTTP/1.1 200 OK\r\n"
std::string status_line(int status);

// Statuses whose responses never carry a body (1xx, 204, 304).
bool status_has_no_body(int status);

// One chunk of chunked transfer encoding; precondition: !data.empty().
std::string chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// The body of an I/O thread of a server or client core: runs the io_context until it stops,
// surviving callbacks that throw (one bad exchange must not take the others down), then tells
// the core one thread fewer is running. Core: ioc, threads_mu, num_running, threads_cv.
template <typename Core>
void run_io(Core* core) {
  for (;;) {
    try {
      core->ioc.run();
      break;
    } catch (...) {
    }
  }
  std::lock_guard lock(core->threads_mu);
  --core->num_running;
  core->threads_cv.notify_all();
}

}  // namespace kvc::http::wire
