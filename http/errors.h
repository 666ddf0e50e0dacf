// OpenAI-style error replies: {"error":{"message":...,"type":...,"param":...,"code":...}}.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kvc::http {

class Responder;

// The JSON body of an error reply; param and code are null when absent.
std::string error_body(std::string_view message, std::string_view type = "invalid_request_error",
                       std::optional<std::string_view> param = std::nullopt,
                       std::optional<std::string_view> code = std::nullopt);

// Sends one whole application/json error reply through the responder.
void send_error(Responder& responder, int status, std::string_view message,
                std::string_view type = "invalid_request_error",
                std::optional<std::string_view> param = std::nullopt);

}  // namespace kvc::http
