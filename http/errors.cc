#include "http/errors.h"

#include <nlohmann/json.hpp>

#include "http/server.h"

namespace kvc::http {

std::string error_body(std::string_view message, std::string_view type,
                       std::optional<std::string_view> param,
                       std::optional<std::string_view> code) {
  nlohmann::json error = {
      {"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (param) error["param"] = *param;
  if (code) error["code"] = *code;
  // replace: a message echoing invalid UTF-8 from a peer must not make dump() throw
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

void send_error(Responder& responder, int status, std::string_view message, std::string_view type,
                std::optional<std::string_view> param, std::optional<std::string_view> code,
                Headers headers) {
  responder.send(status, "application/json", error_body(message, type, param, code),
                 std::move(headers));
}

void send_method_not_allowed(Responder& responder, std::string_view method, std::string_view path,
                             std::string_view allowed) {
  std::string allow(allowed);
  if (allowed == "GET") allow += ", HEAD";
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on a chain of operator+.
  std::string message = "method ";
  message.append(method).append(" is not allowed on ").append(path);
  message.append(" (allowed: ").append(allow).append(")");
  send_error(responder, 405, message, "invalid_request_error", std::nullopt, std::nullopt,
             {{"allow", allow}});
}

}  // namespace kvc::http
