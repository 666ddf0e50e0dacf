// OpenAI-style error replies: {"error":{"message":...,"type":...,"param":...,"code":...}}.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvc::http {

class Responder;

// The JSON body of an error reply; param and code are null when absent.
std::string error_body(std::string_view message, std::string_view type = "invalid_request_error",
                       std::optional<std::string_view> param = std::nullopt,
                       std::optional<std::string_view> code = std::nullopt);

// Sends one whole application/json error reply through the responder, with `headers` beside
// it (e.g. Allow, Accept-Encoding).
void send_error(Responder& responder, int status, std::string_view message,
                std::string_view type = "invalid_request_error",
                std::optional<std::string_view> param = std::nullopt,
                std::optional<std::string_view> code = std::nullopt,
                std::vector<std::pair<std::string, std::string>> headers = {});

// 405 for `method` on `path`, which serves only `allowed`; the Allow header lists what is
// (GET brings HEAD with it).
void send_method_not_allowed(Responder& responder, std::string_view method, std::string_view path,
                             std::string_view allowed);

}  // namespace kvc::http
