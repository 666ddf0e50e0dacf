#include "http/server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cassert>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "http/errors.h"
#include "http/wire.h"

namespace kvc::http {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

std::optional<std::string> find_header(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (wire::iequals(n, name)) return v;
  }
  return std::nullopt;
}

std::optional<std::string> Request::header(std::string_view name) const {
  return find_header(headers, name);
}

bool method_allowed(std::string_view method, std::string_view allowed) {
  return method == allowed || (allowed == "GET" && method == "HEAD");
}

class Session;

struct ServerCore {
  ServerCore(ServerLimits l, Handler h) : limits(l), handler(std::move(h)) {}

  const ServerLimits limits;
  const Handler handler;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work = net::make_work_guard(ioc);
  net::strand<net::io_context::executor_type> accept_strand = net::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  net::steady_timer accept_backoff{accept_strand};

  std::atomic<bool> stopping{false};
  std::atomic<bool> drained{false};  // no thread runs the io_context any more: do not post
  std::atomic<size_t> num_serving{0};
  std::atomic<size_t> num_accepted{0};

  std::mutex sessions_mu;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_session_id = 0;

  wire::IoThreads io_threads;
  bool on_io_thread() const { return io_threads.on_io_thread(); }
};

namespace {

// Trims optional whitespace (RFC 9110 5.6.3) around a list element.
std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

// Request smuggling defence: a proxy in front of us and this server must agree on where the body
// ends, so only unambiguous framing is accepted (RFC 9112 6.1-6.3): Transfer-Encoding exactly
// "chunked" (one header, one coding, HTTP/1.1) and then no Content-Length; and, in HTTP/1.1,
// exactly one Host header (RFC 9112 3.2). Returns why a request is refused.
std::optional<std::string> framing_error(const bhttp::request<bhttp::string_body>& msg) {
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

// Shared by a session and the responder of its current request: "has the client gone" and the
// callback to fire when it does.
class ExchangeState {
 public:
  bool gone() const { return gone_.load(std::memory_order_acquire); }

  void mark_gone() {
    std::function<void()> callback;
    {
      std::lock_guard lock(mu_);
      if (finished_) return;
      gone_.store(true, std::memory_order_release);
      finished_ = true;
      callback = std::move(callback_);
    }
    if (callback) callback();
  }

  // The response completed: the callback will never fire; drop what it captured.
  void finish() {
    std::lock_guard lock(mu_);
    finished_ = true;
    callback_ = nullptr;
  }

  void set_callback(std::function<void()> callback) {
    {
      std::lock_guard lock(mu_);
      if (!finished_) {
        callback_ = std::move(callback);
        return;
      }
      if (!gone()) return;
    }
    if (callback) callback();
  }

 private:
  std::atomic<bool> gone_{false};
  std::mutex mu_;
  bool finished_ = false;
  std::function<void()> callback_;
};

// What a responder needs to know about the request it answers.
struct ExchangeInfo {
  uint64_t id = 0;
  bool head = false;        // HEAD: headers only
  bool http10 = false;      // HTTP/1.0: no chunked encoding
  bool keep_alive = false;  // the connection stays open after this response
};

}  // namespace

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<ServerCore> core, tcp::socket socket, uint64_t id, bool serving)
      : core_(std::move(core)),
        id_(id),
        serving_(serving),
        socket_(std::move(socket)),
        ex_(socket_.get_executor()),
        read_timer_(ex_),
        write_timer_(ex_),
        buffer_(core_->limits.max_header_bytes + kReadChunk) {
    error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    if (serving_) core_->num_serving.fetch_add(1);
  }

  ~Session() {
    if (serving_ && !closed_) core_->num_serving.fetch_sub(1);
  }

  const net::any_io_executor& executor() const { return ex_; }
  ServerCore& core() { return *core_; }

  // On the strand.
  void start() { read_request(); }

  // On the strand: refuse the connection (max_connections) with a 503 and close.
  void reject() { reply_error_and_close(503, "server has too many connections", "server_error"); }

  // On the strand, from a responder: output for exchange `exchange`.
  void enqueue(uint64_t exchange, std::string bytes, bool last) {
    if (closed_ || exchange != exchange_id_ || response_done_) return;
    if (!bytes.empty()) out_queue_.push_back(std::move(bytes));
    if (last) response_done_ = true;
    write_more();
  }

  // On the strand, from a responder: the response cannot be completed (abandoned mid stream).
  void abort(uint64_t exchange) {
    if (closed_ || exchange != exchange_id_) return;
    close();
  }

  // On the strand. Closes the socket at once; an unfinished exchange sees client_gone().
  void close() {
    if (closed_) return;
    closed_ = true;
    phase_ = Phase::kClosed;
    read_timer_.cancel();
    write_timer_.cancel();
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    out_queue_.clear();
    if (serving_) core_->num_serving.fetch_sub(1);
    {
      std::lock_guard lock(core_->sessions_mu);
      core_->sessions.erase(id_);
    }
    if (current_) std::exchange(current_, nullptr)->mark_gone();
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kLinger, kClosed };
  static constexpr size_t kReadChunk = 16 << 10;

  const ServerLimits& limits() const { return core_->limits; }

  // Deadline for the current read phase; on expiry the pending read is cancelled and its handler
  // sees timed_out_.
  void arm_read_timer(std::chrono::milliseconds timeout) {
    uint64_t generation = ++read_timer_generation_;
    read_timer_.expires_after(timeout);
    read_timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      if (ec || self->closed_ || generation != self->read_timer_generation_) return;
      self->read_timed_out_ = true;
      if (self->phase_ == Phase::kLinger || self->phase_ == Phase::kIdle) {
        self->close();
        return;
      }
      error_code ignored;
      self->socket_.cancel(ignored);
    });
  }

  void disarm_read_timer() {
    ++read_timer_generation_;
    read_timer_.cancel();
  }

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(
        std::min<size_t>(limits().max_header_bytes, std::numeric_limits<uint32_t>::max())));
    parser_->body_limit(limits().max_body_bytes);
    if (num_served_ > 0 && buffer_.size() == 0) {
      // keep-alive: idle until the next request's first byte, then the header clock starts
      phase_ = Phase::kIdle;
      arm_read_timer(limits().idle_timeout);
      socket_.async_read_some(buffer_.prepare(kReadChunk),
                              [self = shared_from_this()](error_code ec, size_t n) {
                                self->buffer_.commit(n);
                                if (self->closed_) return;
                                if (ec) {
                                  self->close();
                                  return;
                                }
                                self->read_header();
                              });
      return;
    }
    read_header();
  }

  void read_header() {
    phase_ = Phase::kHeader;
    arm_read_timer(limits().header_timeout);
    bhttp::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    disarm_read_timer();
    if (closed_) return;
    if (ec) return on_read_error(ec);
    auto& msg = parser_->get();
    if (std::optional<std::string> why = framing_error(msg)) {
      // The body's extent is in doubt: answer without reading it, and close.
      reply_error_and_close(400, *why);
      return;
    }
    auto expect = msg[bhttp::field::expect];
    if (msg.version() >= 11 && wire::iequals(expect, "100-continue") && !parser_->is_done()) {
      phase_ = Phase::kBody;
      arm_read_timer(limits().read_timeout);
      net::async_write(socket_, net::buffer(kContinue),
                       [self = shared_from_this()](error_code ec, size_t) {
                         if (self->closed_) return;
                         if (ec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    phase_ = Phase::kBody;
    arm_read_timer(limits().read_timeout);
    bhttp::async_read(socket_, buffer_, *parser_,
                      [self = shared_from_this()](error_code ec, size_t) {
                        self->disarm_read_timer();
                        if (self->closed_) return;
                        if (ec) return self->on_read_error(ec);
                        self->dispatch();
                      });
  }

  void on_read_error(error_code ec) {
    if (read_timed_out_) {
      reply_error_and_close(408,
                            phase_ == Phase::kHeader ? "request headers not received in time"
                                                     : "request body not received in time",
                            "invalid_request_error");
      return;
    }
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
        ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted || ec == net::error::broken_pipe) {
      close();
      return;
    }
    if (ec == bhttp::error::header_limit ||
        (ec == bhttp::error::buffer_overflow && phase_ == Phase::kHeader)) {
      reply_error_and_close(431, "request headers larger than " +
                                     std::to_string(limits().max_header_bytes) + " bytes");
      return;
    }
    if (ec == bhttp::error::body_limit || ec == bhttp::error::buffer_overflow) {
      reply_error_and_close(
          413, "request body larger than " + std::to_string(limits().max_body_bytes) + " bytes");
      return;
    }
    reply_error_and_close(400, "malformed HTTP request: " + ec.message());
  }

  // Error replies the session makes itself (limits, malformed HTTP, refusal): then close.
  void reply_error_and_close(int status, const std::string& message,
                             std::string_view type = "invalid_request_error") {
    std::string body = error_body(message, type);
    std::string bytes = wire::status_line(status);
    bytes += "content-type: application/json\r\ncontent-length: " + std::to_string(body.size()) +
             "\r\nconnection: close\r\n\r\n";
    bytes += body;
    parser_.reset();
    keep_alive_ = false;
    phase_ = Phase::kHandling;
    ++exchange_id_;
    response_done_ = false;
    enqueue(exchange_id_, std::move(bytes), /*last=*/true);
  }

  void dispatch();

  // While a response is in progress (or lingering before close), keep one read pending: it is how
  // a client that goes away is noticed before a write fails. Pipelined bytes are kept for the
  // next request, up to the buffer's bound; beyond it the watch pauses.
  void watch() {
    if (closed_ || watching_) return;
    if (phase_ == Phase::kLinger) buffer_.clear();
    size_t room = buffer_.max_size() - buffer_.size();
    if (room == 0) return;
    watching_ = true;
    socket_.async_read_some(
        buffer_.prepare(std::min(room, kReadChunk)),
        [self = shared_from_this()](error_code ec, size_t n) { self->on_watch(ec, n); });
  }

  void on_watch(error_code ec, size_t n) {
    watching_ = false;
    buffer_.commit(n);
    if (closed_) return;
    if (resume_after_watch_) {
      // cancelled (or completed just before the cancel) after the response ended
      resume_after_watch_ = false;
      if (ec && ec != net::error::operation_aborted) return close();
      read_request();
      return;
    }
    if (ec) return close();
    watch();
  }

  void write_more() {
    if (writing_ || closed_) return;
    if (out_queue_.empty()) {
      if (response_done_ && phase_ == Phase::kHandling) on_response_complete();
      return;
    }
    writing_ = true;
    while (!out_queue_.empty() && in_flight_.size() < 64) {
      in_flight_.push_back(std::move(out_queue_.front()));
      out_queue_.pop_front();
    }
    std::vector<net::const_buffer> buffers;
    buffers.reserve(in_flight_.size());
    for (const auto& s : in_flight_)
      buffers.push_back(net::buffer(s));
    uint64_t generation = ++write_timer_generation_;
    write_timer_.expires_after(limits().write_timeout);
    write_timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
      // a client that does not read is cut
      if (!ec && generation == self->write_timer_generation_) self->close();
    });
    net::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, size_t) {
      self->writing_ = false;
      ++self->write_timer_generation_;
      self->write_timer_.cancel();
      self->in_flight_.clear();
      if (self->closed_) return;
      if (ec) return self->close();
      self->write_more();
    });
  }

  void on_response_complete() {
    if (current_) std::exchange(current_, nullptr)->finish();
    if (!keep_alive_ || core_->stopping.load()) return linger_then_close();
    if (watching_) {
      // the pending watch read is cancelled; its handler resumes with the next request
      resume_after_watch_ = true;
      error_code ignored;
      socket_.cancel(ignored);
      return;
    }
    read_request();
  }

  // Half-close and drain what the client still sends for a moment, so that our last response is
  // not destroyed by a TCP reset (closing with unread input sends RST).
  void linger_then_close() {
    phase_ = Phase::kLinger;
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    arm_read_timer(std::min(limits().read_timeout, std::chrono::milliseconds(1000)));
    watch();
  }

  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

  std::shared_ptr<ServerCore> core_;  // first: destroyed last, after the socket and timers
  const uint64_t id_;
  const bool serving_;
  tcp::socket socket_;
  net::any_io_executor ex_;  // the session's strand
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  uint64_t read_timer_generation_ = 0;
  uint64_t write_timer_generation_ = 0;
  bool read_timed_out_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string remote_;
  Phase phase_ = Phase::kHeader;
  bool closed_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  uint64_t num_served_ = 0;

  // the exchange being answered
  uint64_t exchange_id_ = 0;
  std::shared_ptr<ExchangeState> current_;
  bool keep_alive_ = false;
  bool response_done_ = false;
  std::deque<std::string> out_queue_;
  std::vector<std::string> in_flight_;
  bool writing_ = false;
};

namespace {

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
    net::post(session_->executor(), [s = session_, id = info_.id, b = std::move(bytes),
                                     last]() mutable { s->enqueue(id, std::move(b), last); });
  }

  void post_abort() {
    if (session_->core().drained.load()) return;
    net::post(session_->executor(), [s = session_, id = info_.id] { s->abort(id); });
  }

  const std::shared_ptr<Session> session_;
  const std::shared_ptr<ExchangeState> state_;
  const ExchangeInfo info_;
  std::mutex mu_;
  Phase phase_ = Phase::kNone;
};

}  // namespace

void Session::dispatch() {
  phase_ = Phase::kHandling;
  ++num_served_;
  auto& msg = parser_->get();
  Request request;
  request.method = std::string(msg.method_string());
  request.target = std::string(msg.target());
  for (const auto& field : msg) {
    request.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  request.body = std::move(msg.body());
  request.remote = remote_;

  ExchangeInfo info;
  info.id = ++exchange_id_;
  info.head = msg.method() == bhttp::verb::head;
  info.http10 = msg.version() < 11;
  keep_alive_ = msg.keep_alive() && !core_->stopping.load() && !info.http10;
  info.keep_alive = keep_alive_;
  parser_.reset();

  current_ = std::make_shared<ExchangeState>();
  response_done_ = false;
  auto responder = std::make_shared<ResponderImpl>(shared_from_this(), current_, info);
  watch();
  try {
    core_->handler(std::move(request), responder);
  } catch (const std::exception& e) {
    responder->fail_from_handler(e.what());
  } catch (...) {
    responder->fail_from_handler("unknown exception");
  }
}

namespace {

void do_accept(const std::shared_ptr<ServerCore>& core);

void on_accept(const std::shared_ptr<ServerCore>& core, error_code ec, tcp::socket socket) {
  if (core->stopping.load() || ec == net::error::operation_aborted) return;
  if (ec) {
    // e.g. out of file descriptors: back off instead of spinning
    core->accept_backoff.expires_after(std::chrono::milliseconds(50));
    core->accept_backoff.async_wait([core](error_code ec) {
      if (!ec) do_accept(core);
    });
    return;
  }
  core->num_accepted.fetch_add(1);
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  bool serving = core->num_serving.load() < core->limits.max_connections;
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(core->sessions_mu);
    uint64_t id = core->next_session_id++;
    session = std::make_shared<Session>(core, std::move(socket), id, serving);
    // stop() snapshots the sessions under this lock: a session registered after it must close
    if (!core->stopping.load()) core->sessions.emplace(id, session);
  }
  net::dispatch(session->executor(), [session, serving] {
    if (session->core().stopping.load()) {
      session->close();
    } else if (serving) {
      session->start();
    } else {
      session->reject();
    }
  });
  do_accept(core);
}

void do_accept(const std::shared_ptr<ServerCore>& core) {
  core->acceptor.async_accept(
      net::make_strand(core->ioc),
      [core](error_code ec, tcp::socket socket) { on_accept(core, ec, std::move(socket)); });
}

}  // namespace

Server::Server(ServerLimits limits, Handler handler, int threads)
    : core_(std::make_shared<ServerCore>(limits, std::move(handler))) {
  assert(core_->handler);
  core_->io_threads.start(core_->ioc, threads);
}

Server::~Server() {
  assert(!core_->on_io_thread());
  stop();
}

Result<uint16_t> Server::listen(const std::string& host, uint16_t port) {
  error_code ec;
  tcp::resolver resolver(core_->ioc);
  auto results = resolver.resolve(host, std::to_string(port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) {
    return Error{"cannot resolve listen address " + host + ": " + ec.message()};
  }
  tcp::endpoint endpoint = results.begin()->endpoint();
  auto& acceptor = core_->acceptor;
  std::string where = host + ":" + std::to_string(port);
  acceptor.open(endpoint.protocol(), ec);
  if (ec) return Error{"open " + where + ": " + ec.message()};
  acceptor.set_option(net::socket_base::reuse_address(true), ec);
  acceptor.bind(endpoint, ec);
  if (ec) return Error{"bind " + where + ": " + ec.message()};
  acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return Error{"listen " + where + ": " + ec.message()};
  uint16_t bound = acceptor.local_endpoint(ec).port();
  if (ec) return Error{"listen " + where + ": " + ec.message()};
  net::post(core_->accept_strand, [core = core_] { do_accept(core); });
  return bound;
}

void Server::stop() {
  auto core = core_;
  if (!core->stopping.exchange(true)) {
    net::post(core->accept_strand, [core] {
      error_code ignored;
      core->acceptor.close(ignored);
      core->accept_backoff.cancel();
    });
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard lock(core->sessions_mu);
      for (auto& [id, weak] : core->sessions) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live)
      net::post(s->executor(), [s] { s->close(); });
    core->work.reset();
  }
  if (core->on_io_thread()) return;  // ~Server joins

  // Closed sessions leave no work behind, so run() returns; a stuck handler must not hang stop().
  core->io_threads.stop_and_join(core->ioc, std::chrono::seconds(2));
  // Run what is left (completions of closed sockets) so no handler keeps a session alive; a
  // responder still held by the engine keeps its session, which no longer posts anything.
  for (int i = 0; i < 1000; ++i) {
    core->ioc.restart();
    if (core->ioc.poll() == 0) break;
  }
  core->drained.store(true);
  for (int i = 0; i < 1000; ++i) {
    core->ioc.restart();
    if (core->ioc.poll() == 0) break;
  }
}

boost::asio::io_context& Server::io_context() {
  return core_->ioc;
}

size_t Server::num_connections() const {
  return core_->num_serving.load();
}

size_t Server::num_accepted() const {
  return core_->num_accepted.load();
}

}  // namespace kvc::http
