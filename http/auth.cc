#include "http/auth.h"

#include <fstream>

#include "http/errors.h"
#include "http/wire.h"

namespace kvc::http {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (is_space(s.front()) || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<std::string> bearer_token(const Request& request) {
  const std::optional<std::string> value = request.header("authorization");
  if (!value) return std::nullopt;
  std::string_view v = trim(*value);
  constexpr std::string_view kScheme = "bearer";
  if (v.size() <= kScheme.size() || !wire::iequals(v.substr(0, kScheme.size()), kScheme) ||
      !is_space(v[kScheme.size()])) {
    return std::nullopt;
  }
  v = trim(v.substr(kScheme.size()));
  if (v.empty()) return std::nullopt;
  for (char c : v) {
    if (is_space(c)) return std::nullopt;
  }
  return std::string(v);
}

bool key_matches(std::string_view token, const std::vector<std::string>& keys) {
  bool any = false;
  for (const std::string& key : keys) {
    // Lengths are not secret (keys are long random strings); contents are compared in full.
    unsigned char diff = token.size() == key.size() ? 0 : 1;
    for (size_t i = 0; i < key.size(); ++i) {
      const char t = i < token.size() ? token[i] : 0;
      diff |= static_cast<unsigned char>(t ^ key[i]);
    }
    any |= diff == 0;
  }
  return any;
}

Status validate_api_key(std::string_view key) {
  if (key.empty() || key.size() > 4096) return Error{"an API key must be 1 to 4096 bytes"};
  for (char c : key) {
    if (c <= ' ' || c > '~') {
      return Error{"an API key must be printable ASCII without spaces"};
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> read_api_keys_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read API key file " + path};
  std::vector<std::string> keys;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string_view key = trim(line);
    if (key.empty() || key.front() == '#') continue;
    if (Status s = validate_api_key(key); !s.ok()) {
      return Error{path + ":" + std::to_string(number) + ": " + s.message()};
    }
    keys.emplace_back(key);
  }
  if (in.bad()) return Error{"cannot read API key file " + path};
  if (keys.empty()) return Error{"API key file " + path + " holds no key"};
  return keys;
}

bool authorize(const Request& request, const std::vector<std::string>& keys, Responder& responder,
               std::string_view what) {
  if (keys.empty()) return true;
  const std::optional<std::string> token = bearer_token(request);
  if (token && key_matches(*token, keys)) return true;
  send_error(responder, 401, "missing or wrong " + std::string(what), "authentication_error");
  return false;
}

}  // namespace kvc::http
