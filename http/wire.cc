#include "http/wire.h"

#include <boost/beast/http/status.hpp>
#include <cstdio>

namespace kvc::http::wire {

bool header_is_safe(std::string_view name, std::string_view value) {
  if (name.empty()) return false;
  for (char c : name) {
    if (c == '\r' || c == '\n' || c == '\0' || c == ':' || c == ' ' || c == '\t') return false;
  }
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string status_line(int status) {
  namespace bhttp = boost::beast::http;
  auto known = bhttp::int_to_status(static_cast<unsigned>(status));
  std::string_view reason = known == bhttp::status::unknown
                                ? std::string_view("Unknown")
                                : std::string_view(bhttp::obsolete_reason(known));
  std::string line = "HTTP/1.1 " + std::to_string(status) + " ";
  line.append(reason);
  line += "\r\n";
  return line;
}

bool status_has_no_body(int status) {
  return (status >= 100 && status < 200) || status == 204 || status == 304;
}

std::string chunk(std::string_view data) {
  char size[24];
  int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out;
  out.reserve(static_cast<size_t>(n) + data.size() + 2);
  out.append(size, static_cast<size_t>(n));
  out.append(data);
  out += "\r\n";
  return out;
}

}  // namespace kvc::http::wire
