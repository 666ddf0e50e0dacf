// The Responder a handler answers one request with (private to http/): it writes the
// response, whole or streamed, through its session, and tells the handler when the client left.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "http/session.h"

namespace kvc::http {

class ResponderImpl final : public Responder {
 public:
  ResponderImpl(std::shared_ptr<Session> session, std::shared_ptr<ExchangeState> state,
                ExchangeInfo info)
      : session_(std::move(session)), state_(std::move(state)), info_(info) {}

  ~ResponderImpl() override {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::kNone) {
      send_locked(500, "application/json",
                  error_body("the server dropped the request without a response", "server_error"),
                  {});
    } else if (phase_ == Phase::kStreaming) {
      post_abort();
    }
  }

  void send(int status, std::string content_type, std::string body,
            Headers extra_headers) override {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::kNone) return;
    send_locked(status, std::move(content_type), std::move(body), std::move(extra_headers));
  }

  void start_stream(int status, std::string content_type, Headers extra_headers) override {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::kNone) return;
    if (wire::status_has_no_body(status) || info_.head) {
      // no body may follow: the stream's write()/end() become no-ops
      send_locked(status, std::move(content_type), {}, std::move(extra_headers));
      return;
    }
    std::string head = head_lines(status, content_type, extra_headers);
    head += info_.http10 ? "" : "transfer-encoding: chunked\r\n";
    head += "\r\n";
    phase_ = Phase::kStreaming;
    post(std::move(head), false);
  }

  void write(std::string chunk) override {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::kStreaming || chunk.empty()) return;
    post(info_.http10 ? std::move(chunk) : wire::chunk(chunk), false);
  }

  void end() override {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::kStreaming) return;
    phase_ = Phase::kDone;
    post(info_.http10 ? std::string() : std::string(wire::kLastChunk), true);
  }

  void abort() override {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::kNone) {
      send_locked(502, "application/json",
                  error_body("the response's source failed before it started", "server_error"), {});
    } else if (phase_ == Phase::kStreaming) {
      phase_ = Phase::kDone;
      post_abort();
    }
  }

  bool client_gone() const override { return state_->gone(); }

  void on_client_gone(std::function<void()> callback) override {
    state_->set_callback(std::move(callback));
  }

  // The handler threw: a 500 if nothing was sent yet, else the connection is closed.
  void fail_from_handler(std::string_view what) {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::kNone) {
      send_locked(500, "application/json",
                  error_body(std::string("internal error: ") + std::string(what), "server_error"),
                  {});
    } else if (phase_ == Phase::kStreaming) {
      phase_ = Phase::kDone;
      post_abort();
    }
  }

 private:
  enum class Phase { kNone, kStreaming, kDone };

  std::string head_lines(int status, std::string_view content_type,
                         const Headers& extra_headers) const {
    if (const auto& note = session_->core().limits.on_response) note(status);
    std::string head = wire::status_line(status);
    if (!content_type.empty() && wire::header_is_safe("content-type", content_type)) {
      head += "content-type: ";
      head += content_type;
      head += "\r\n";
    }
    if (!info_.keep_alive) {
      head += "connection: close\r\n";
    } else if (info_.http10) {
      head += "connection: keep-alive\r\n";
    }
    for (const auto& [name, value] : extra_headers) {
      if (!wire::header_is_safe(name, value) || wire::iequals(name, "content-length") ||
          wire::iequals(name, "transfer-encoding") || wire::iequals(name, "connection")) {
        continue;
      }
      head += name + ": " + value + "\r\n";
    }
    return head;
  }

  void send_locked(int status, std::string content_type, std::string body, Headers extra_headers) {
    if (status < 100 || status > 999) status = 500;
    std::string bytes = head_lines(status, content_type, extra_headers);
    if (!wire::status_has_no_body(status)) {
      bytes += "content-length: " + std::to_string(body.size()) + "\r\n";
    }
    bytes += "\r\n";
    if (!info_.head && !wire::status_has_no_body(status)) bytes += body;
    phase_ = Phase::kDone;
    post(std::move(bytes), true);
  }

  void post(std::string bytes, bool last) {
    if (session_->core().drained.load()) return;
    session_->post_output(info_.id, std::move(bytes), last);
  }

  void post_abort() {
    if (session_->core().drained.load()) return;
    session_->post_abort(info_.id);
  }

  const std::shared_ptr<Session> session_;
  const std::shared_ptr<ExchangeState> state_;
  const ExchangeInfo info_;
  std::mutex mu_;
  Phase phase_ = Phase::kNone;
};

}  // namespace kvc::http
