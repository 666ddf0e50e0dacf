#include "http/session.h"

#include <optional>
#include <string>

#include "http/errors.h"
#include "http/responder.h"

namespace kvc::http {

namespace {

// Trims optional whitespace (RFC 9110 5.6.3) around a list element.
std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// A request target in absolute form ("http://host/path?q", which RFC 9112 has servers accept)
// as the origin form the handlers route on ("/path?q"); other forms as they are.
std::string origin_form(std::string_view target) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() && wire::iequals(target.substr(0, scheme.size()), scheme)) {
      const size_t path = target.find_first_of("/?", scheme.size());
      if (path == std::string_view::npos) return "/";
      return target[path] == '?' ? "/" + std::string(target.substr(path))
                                 : std::string(target.substr(path));
    }
  }
  return std::string(target);
}

// Request smuggling defence: a proxy in front of us and this server must agree on where the body
// ends, so only unambiguous framing is accepted (RFC 9112 6.1-6.3): Transfer-Encoding exactly
// "chunked" (one header, one coding, HTTP/1.1) and then no Content-Length; and, in HTTP/1.1,
// exactly one Host header (RFC 9112 3.2). Returns why a request is refused.
}  // namespace

std::optional<std::string> framing_error(const bhttp::request<RequestBody>& msg) {
  size_t num_host = 0, num_te = 0, num_cl = 0;
  std::string_view te;
  for (const auto& field : msg) {
    const std::string_view name(field.name_string().data(), field.name_string().size());
    if (wire::iequals(name, "host")) ++num_host;
    if (wire::iequals(name, "content-length")) ++num_cl;
    if (wire::iequals(name, "transfer-encoding")) {
      ++num_te;
      te = std::string_view(field.value().data(), field.value().size());
    }
  }
  if (msg.version() >= 11 && num_host != 1) {
    return num_host == 0 ? "missing Host header" : "more than one Host header";
  }
  if (num_te == 0) return std::nullopt;
  if (msg.version() < 11) return "Transfer-Encoding is not allowed in HTTP/1.0";
  if (num_te > 1 || !wire::iequals(trim_ows(te), "chunked")) {
    return "unsupported Transfer-Encoding (only a lone 'chunked' is accepted)";
  }
  if (num_cl > 0) return "both Transfer-Encoding and Content-Length";
  return std::nullopt;
}

void Session::dispatch() {
  auto& msg = parser_->get();
  if (probes_only_) {
    // Beyond max_connections: a health probe is answered (then the connection closes), anything
    // else refused as if no slot had been kept.
    const std::string target =
        origin_form(std::string_view(msg.target().data(), msg.target().size()));
    const std::string_view path = std::string_view(target).substr(0, target.find('?'));
    const auto& probes = limits().probe_paths;
    const bool probe = (msg.method() == bhttp::verb::get || msg.method() == bhttp::verb::head) &&
                       std::find(probes.begin(), probes.end(), path) != probes.end();
    if (!probe) return reply_error_and_close(503, kTooMany, "server_error");
  }
  phase_ = Phase::kHandling;
  ++num_served_;
  Request request;
  request.method = std::string(msg.method_string());
  request.target = origin_form(std::string_view(msg.target().data(), msg.target().size()));
  std::optional<std::string> encoding;  // a Content-Encoding other than identity
  for (const auto& field : msg) {
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    if (field.name() == bhttp::field::content_encoding) {
      // A list of codings (RFC 9110 8.4): anything but identity (and empty elements).
      std::string_view list(field.value().data(), field.value().size());
      while (!list.empty()) {
        const size_t comma = list.find(',');
        const std::string_view coding = trim_ows(list.substr(0, comma));
        if (!coding.empty() && !wire::iequals(coding, "identity")) encoding = std::string(coding);
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
    }
  }
  request.body = std::move(msg.body());
  request.remote = remote_;

  ExchangeInfo info;
  info.id = ++exchange_id_;
  info.head = msg.method() == bhttp::verb::head;
  info.http10 = msg.version() < 11;
  keep_alive_ = msg.keep_alive() && !core_->stopping.load() && !info.http10 && !probes_only_;
  info.keep_alive = keep_alive_;
  parser_.reset();

  current_ = std::make_shared<ExchangeState>();
  response_done_ = false;
  response_started_ = false;
  exchange_http11_ = !info.http10;
  auto responder = std::make_shared<ResponderImpl>(shared_from_this(), current_, info);
  watch();
  probe_half_closed(false);
  if (encoding && !request.body.empty()) {
    // The body would be read as it is: a compressed one as invalid JSON. Accept-Encoding says
    // which codings a request may use (RFC 7694): none but identity.
    return send_error(*responder, 415,
                      "Content-Encoding '" + *encoding +
                          "' is not supported: send the body uncompressed (identity)",
                      "invalid_request_error", std::nullopt, std::nullopt,
                      {{"accept-encoding", "identity"}});
  }
  try {
    core_->handler(std::move(request), responder);
  } catch (const std::exception& e) {
    responder->fail_from_handler(e.what());
  } catch (...) {
    responder->fail_from_handler("unknown exception");
  }
}

}  // namespace kvc::http
