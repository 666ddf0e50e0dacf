// API keys for both servers: "Authorization: Bearer KEY" (RFC 6750 2.1). The scheme name is
// matched in any case (RFC 9110 11.1), the key byte for byte and in constant time.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "http/server.h"

namespace kvc::http {

// The token of the first Authorization header if its scheme is Bearer; nullopt otherwise
// (missing header, another scheme, no token, or more than one word after the scheme).
std::optional<std::string> bearer_token(const Request& request);

// True when `token` equals one of `keys`. Every key is compared over its whole length, so the time
// taken says nothing about how many leading bytes of a key a guess got right.
bool key_matches(std::string_view token, const std::vector<std::string>& keys);

// The servers' gate: with no keys configured every request passes; otherwise a request without
// one of `keys` as its Bearer token is answered 401 (OpenAI-style error body: "missing or wrong "
// + `what`) and false returned.
bool authorize(const Request& request, const std::vector<std::string>& keys, Responder& responder,
               std::string_view what = "API key (Authorization: Bearer ...)");

// A key must fit in a header value as is: 1 to 4096 printable ASCII bytes, no spaces.
Status validate_api_key(std::string_view key);

// Keys from a file (a Kubernetes Secret mounted as a file): one per line; blank lines and lines
// starting with '#' are skipped; surrounding whitespace and CR are trimmed. Several keys let a
// key be rotated without downtime. An unreadable file, no key, or an invalid key is an error.
Result<std::vector<std::string>> read_api_keys_file(const std::string& path);

}  // namespace kvc::http
