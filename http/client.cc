#include "http/client.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cassert>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include "http/deadline.h"
#include "http/wire.h"

namespace kvc::http {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

std::optional<std::string> ClientResponse::header(std::string_view name) const {
  return find_header(headers, name);
}

void Cancellation::cancel(std::string reason) {
  std::function<void(const std::string&)> canceller;
  {
    std::lock_guard lock(mu_);
    if (reason_) return;
    reason_ = std::move(reason);
    canceller = std::move(canceller_);
  }
  if (canceller) canceller(*reason_);  // reason_ is never changed again
}

bool Cancellation::cancelled() const {
  std::lock_guard lock(mu_);
  return reason_.has_value();
}

void Cancellation::attach(std::function<void(const std::string&)> canceller) {
  {
    std::lock_guard lock(mu_);
    if (!reason_) {
      canceller_ = std::move(canceller);
      return;
    }
  }
  canceller(*reason_);
}

class Exchange;

struct ClientCore {
  ClientCore(ClientLimits l, const Clock& c)
      : limits(l),
        clock(c),
        threads(std::max(1, l.io_threads)),
        own(std::make_unique<net::io_context>(threads)),
        ioc(*own) {}
  ClientCore(ClientLimits l, net::io_context& external, int external_threads, const Clock& c)
      : limits(l), clock(c), threads(std::max(1, external_threads)), ioc(external), shared(true) {}

  const ClientLimits limits;
  const Clock& clock;                    // pooled connections' ages
  const int threads;                     // running ioc
  std::unique_ptr<net::io_context> own;  // null when the exchanges run on another's io_context
  net::io_context& ioc;
  const bool shared = false;

  // An exchange's executor (wire::one_at_a_time).
  net::any_io_executor exchange_executor() { return wire::one_at_a_time(ioc, threads); }
  net::executor_work_guard<net::io_context::executor_type> work = net::make_work_guard(ioc);
  std::atomic<bool> stopping{false};
  std::atomic<size_t> num_connects{0};

  struct Idle {
    tcp::socket socket;
    Clock::TimePoint since;
  };
  std::mutex pool_mu;
  std::unordered_map<std::string, std::vector<Idle>> pool;  // key "host:port"

  std::mutex exchanges_mu;
  std::unordered_map<uint64_t, std::weak_ptr<Exchange>> exchanges;
  uint64_t next_exchange_id = 0;

  wire::IoThreads io_threads;
  // One of the threads running ioc (its own, or those of the io_context's owner).
  bool on_io_thread() const { return ioc.get_executor().running_in_this_thread(); }

  // A pooled connection that is still open and has nothing unread, or nullopt.
  std::optional<tcp::socket> take_idle(const std::string& key) {
    std::lock_guard lock(pool_mu);
    auto it = pool.find(key);
    if (it == pool.end()) return std::nullopt;
    auto& idle = it->second;
    const Clock::TimePoint now = clock.now();
    while (!idle.empty()) {
      Idle candidate = std::move(idle.back());
      idle.pop_back();
      if (now - candidate.since > limits.pool_idle_timeout) continue;
      // peek: 0 means the server closed it, data means a stray response; either way unusable
      char byte;
      ssize_t n = ::recv(candidate.socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::move(candidate.socket);
    }
    return std::nullopt;
  }

  void give_idle(const std::string& key, tcp::socket socket) {
    if (stopping.load()) return;
    std::lock_guard lock(pool_mu);
    auto& idle = pool[key];
    if (idle.size() >= limits.max_idle_per_host) idle.erase(idle.begin());  // oldest out
    idle.push_back(Idle{std::move(socket), clock.now()});
  }
};

namespace {

// The request line and headers; the body follows them on the wire from its own buffer.
std::string serialize_head(const std::string& host, uint16_t port, const std::string& method,
                           const std::string& target, size_t body_size, const Headers& headers) {
  std::string out = method + " " + target + " HTTP/1.1\r\n";
  bool has_host = false;
  for (const auto& [name, value] : headers) {
    if (!wire::header_is_safe(name, value) || wire::iequals(name, "content-length") ||
        wire::iequals(name, "transfer-encoding") || wire::iequals(name, "connection")) {
      continue;
    }
    if (wire::iequals(name, "host")) has_host = true;
    out += name + ": " + value + "\r\n";
  }
  if (!has_host) out += "host: " + host + ":" + std::to_string(port) + "\r\n";
  bool may_have_body = !(wire::iequals(method, "GET") || wire::iequals(method, "HEAD"));
  if (body_size > 0 || may_have_body) {
    out += "content-length: " + std::to_string(body_size) + "\r\n";
  }
  out += "\r\n";
  return out;
}

}  // namespace

// One request/response on one connection. Its handlers run one at a time on its executor (a strand
// or the one I/O thread: ClientCore::exchange_executor); kept alive by its handlers.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<ClientCore> core, uint64_t id, std::string host, uint16_t port,
           std::string request_head, Body body, bool head, Client::OnHeaders on_headers,
           Client::OnChunk on_chunk, Client::OnDone on_done,
           std::optional<std::chrono::milliseconds> total_timeout, StreamOptions options)
      : core_(std::move(core)),
        id_(id),
        ex_(core_->exchange_executor()),
        host_(std::move(host)),
        port_(port),
        key_(host_ + ":" + std::to_string(port_)),
        request_head_(std::move(request_head)),
        body_(std::move(body)),
        head_(head),
        on_headers_(std::move(on_headers)),
        on_chunk_(std::move(on_chunk)),
        on_done_(std::move(on_done)),
        total_timeout_(total_timeout),
        header_timeout_(
            options.response_header_timeout.value_or(core_->limits.response_header_timeout)),
        body_idle_timeout_(options.body_idle_timeout.value_or(core_->limits.body_idle_timeout)),
        cancellation_(std::move(options.cancellation)),
        on_timeout_(std::move(options.on_timeout)),
        on_written_(std::move(options.on_written)),
        deadline_(ex_),
        total_timer_(ex_),
        resolver_(ex_) {}

  const net::any_io_executor& executor() const { return ex_; }

  // On its executor.
  void start() {
    if (cancellation_) {
      // Held weakly: a cancellation kept by its owner must not keep a finished exchange alive.
      cancellation_->attach([weak = weak_from_this()](const std::string& reason) {
        if (auto self = weak.lock()) {
          net::post(self->ex_, [self, reason] { self->fail(reason); });
        }
      });
      if (cancellation_->cancelled()) return;  // its fail() is queued on its executor
    }
    if (total_timeout_) {
      total_timer_.expires_after(*total_timeout_);
      total_timer_.async_wait([self = shared_from_this()](error_code ec) {
        if (!ec) self->fail("request timed out");
      });
    }
    if (auto pooled = core_->take_idle(key_)) {
      socket_.emplace(std::move(*pooled));
      reused_ = true;
      write_request();
      return;
    }
    connect();
  }

  // On its executor: ends the exchange with an error (idempotent). The connection is reset, not
  // closed: the server learns at once that nobody waits for the response (an orderly FIN reads
  // as a client that half-closed and still waits: http/session.h probe_half_closed).
  void fail(std::string message) {
    if (done_) return;
    close_socket(/*reset=*/true);
    finish(Error{std::move(message)});
  }

 private:
  template <typename F>
  auto on_executor(F&& f) {
    return net::bind_executor(ex_, std::forward<F>(f));
  }

  // The exchange's steps, each under its own deadline.
  enum class Step { kConnect, kResponseHeader, kBody };

  // Deadline for the current step; on expiry the socket is closed and the step fails.
  void arm(std::chrono::milliseconds timeout, Step step) {
    step_ = step;
    deadline_.arm(timeout, [self = shared_from_this()] { self->on_deadline(); });
  }

  // The current step's deadline passed. When the whole request had been written, its answer is
  // late or stalled (the server may still be working on it): StreamOptions::on_timeout hears of
  // it before on_done.
  void on_deadline() {
    if (done_) return;
    const bool after_write =
        step_ == Step::kBody || (step_ == Step::kResponseHeader && request_written_);
    if (after_write && on_timeout_) std::exchange(on_timeout_, nullptr)();
    fail(timeout_message());
  }

  void disarm() { deadline_.clear(); }

  std::string timeout_message() const {
    switch (step_) {
      case Step::kConnect:
        return "connect to " + key_ + " timed out";
      case Step::kResponseHeader:
        return "no response from " + key_ + " within " + std::to_string(header_timeout_.count()) +
               " ms";
      case Step::kBody:
        break;
    }
    return "response from " + key_ + " stalled: nothing for " +
           std::to_string(body_idle_timeout_.count()) + " ms";
  }

  void connect() {
    reused_ = false;
    socket_.emplace(core_->ioc);
    arm(core_->limits.connect_timeout, Step::kConnect);
    resolver_.async_resolve(
        host_, std::to_string(port_),
        on_executor(
            [self = shared_from_this()](error_code ec, tcp::resolver::results_type results) {
              if (self->done_) return;
              if (ec) return self->fail("cannot resolve " + self->host_ + ": " + ec.message());
              net::async_connect(
                  *self->socket_, results,
                  self->on_executor([self](error_code ec, const tcp::endpoint&) {
                    if (self->done_) return;
                    if (ec) {
                      return self->fail("connect to " + self->key_ + ": " + ec.message());
                    }
                    self->core_->num_connects.fetch_add(1);
                    error_code ignored;
                    self->socket_->set_option(tcp::no_delay(true), ignored);
                    self->write_request();
                  }));
            }));
  }

  void write_request() {
    request_written_ = false;
    arm(header_timeout_, Step::kResponseHeader);
    const std::array<net::const_buffer, 2> request{net::buffer(request_head_),
                                                   net::buffer(body_.view())};
    net::async_write(*socket_, request,
                     on_executor([self = shared_from_this()](error_code ec, size_t) {
                       if (self->done_) return;
                       if (ec) return self->retry_or_fail("write to " + self->key_, ec);
                       self->request_written_ = true;
                       if (self->on_written_) std::exchange(self->on_written_, nullptr)();
                       self->read_header();
                     }));
  }

  void read_header() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(
        std::min<size_t>(core_->limits.max_header_bytes, std::numeric_limits<uint32_t>::max())));
    parser_->body_limit(boost::none);  // streamed through, never held whole
    if (head_) parser_->skip(true);
    bhttp::async_read_header(*socket_, buffer_, *parser_,
                             on_executor([self = shared_from_this()](error_code ec, size_t) {
                               if (self->done_) return;
                               if (ec) return self->retry_or_fail("read from " + self->key_, ec);
                               self->on_header();
                             }));
  }

  // A reused connection the server had already closed fails before any response byte: once, the
  // request goes again on a fresh connection (the server cannot have processed it).
  void retry_or_fail(const std::string& what, error_code ec) {
    bool stale = ec == net::error::eof || ec == net::error::connection_reset ||
                 ec == net::error::broken_pipe || ec == bhttp::error::end_of_stream;
    if (reused_ && stale && buffer_.size() == 0 && !retried_) {
      retried_ = true;
      close_socket();
      buffer_.clear();
      connect();
      return;
    }
    fail(what + ": " + ec.message());
  }

  void on_header() {
    disarm();
    auto& msg = parser_->get();
    Headers headers;
    for (const auto& field : msg) {
      headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    if (on_headers_) on_headers_(static_cast<int>(msg.result_int()), headers);
    if (done_) return;
    if (parser_->is_done()) return complete();
    read_body();
  }

  void read_body() {
    auto& body = parser_->get().body();
    body.data = chunk_.data();
    body.size = chunk_.size();
    arm(body_idle_timeout_, Step::kBody);
    bhttp::async_read_some(*socket_, buffer_, *parser_,
                           on_executor([self = shared_from_this()](error_code ec, size_t) {
                             if (self->done_) return;
                             if (ec == bhttp::error::need_buffer) ec = {};
                             if (ec)
                               return self->fail("read from " + self->key_ + ": " + ec.message());
                             size_t got = self->chunk_.size() - self->parser_->get().body().size;
                             if (got > 0 && self->on_chunk_ &&
                                 !self->on_chunk_(std::string_view(self->chunk_.data(), got))) {
                               return self->fail("cancelled");
                             }
                             if (self->done_) return;
                             if (self->parser_->is_done()) return self->complete();
                             self->read_body();
                           }));
  }

  void complete() {
    disarm();
    bool reusable = parser_->keep_alive() && buffer_.size() == 0 && !core_->stopping.load();
    if (reusable) {
      core_->give_idle(key_, std::move(*socket_));
      socket_.reset();
    } else {
      close_socket();
    }
    finish(Status::Ok());
  }

  void close_socket(bool reset = false) {
    error_code ignored;
    resolver_.cancel();
    if (socket_) {
      if (reset && socket_->is_open()) {
        socket_->set_option(net::socket_base::linger(true, 0), ignored);  // close() sends RST
      } else {
        socket_->shutdown(tcp::socket::shutdown_both, ignored);
      }
      socket_->close(ignored);
    }
  }

  void finish(Status status) {
    done_ = true;
    deadline_.cancel();  // releases the exchange its pending wait holds
    total_timer_.cancel();
    {
      std::lock_guard lock(core_->exchanges_mu);
      core_->exchanges.erase(id_);
    }
    auto on_done = std::move(on_done_);
    on_headers_ = nullptr;
    on_chunk_ = nullptr;
    on_timeout_ = nullptr;
    on_written_ = nullptr;
    if (on_done) on_done(std::move(status));
  }

  std::shared_ptr<ClientCore> core_;  // first: destroyed last, after the socket and timers
  const uint64_t id_;
  net::any_io_executor ex_;  // ClientCore::exchange_executor()
  const std::string host_;
  const uint16_t port_;
  const std::string key_;
  const std::string request_head_;
  const Body body_;  // shared with the caller: never copied
  const bool head_;
  Client::OnHeaders on_headers_;
  Client::OnChunk on_chunk_;
  Client::OnDone on_done_;
  const std::optional<std::chrono::milliseconds> total_timeout_;
  const std::chrono::milliseconds header_timeout_;
  const std::chrono::milliseconds body_idle_timeout_;
  const std::shared_ptr<Cancellation> cancellation_;
  std::function<void()> on_timeout_;  // StreamOptions::on_timeout
  std::function<void()> on_written_;  // StreamOptions::on_written
  Deadline deadline_;                 // of the current step (arm)
  Step step_ = Step::kConnect;
  net::steady_timer total_timer_;
  tcp::resolver resolver_;
  std::optional<tcp::socket> socket_;
  boost::beast::flat_buffer buffer_;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser_;
  std::array<char, 16 << 10> chunk_;  // not zero-filled: only what a read stored is read
  bool reused_ = false;
  bool retried_ = false;
  bool request_written_ = false;  // this connection's request is out: a timeout is a late answer
  bool done_ = false;
};

namespace {

void start_exchange(const std::shared_ptr<ClientCore>& core, const std::string& host, uint16_t port,
                    std::string method, std::string target, Body body, Headers headers,
                    Client::OnHeaders on_headers, Client::OnChunk on_chunk, Client::OnDone on_done,
                    std::optional<std::chrono::milliseconds> timeout, StreamOptions options = {}) {
  std::string head_bytes = serialize_head(host, port, method, target, body.view().size(), headers);
  bool head = wire::iequals(method, "HEAD");
  std::shared_ptr<Exchange> exchange;
  {
    // Checked under the lock shutdown() sets it under: an exchange is either registered before
    // shutdown (which then fails it) or refused here, never started on a stopped client.
    std::unique_lock lock(core->exchanges_mu);
    if (core->stopping.load()) {
      lock.unlock();
      if (on_done) on_done(Error{"client shut down"});
      return;
    }
    uint64_t id = core->next_exchange_id++;
    exchange = std::make_shared<Exchange>(
        core, id, host, port, std::move(head_bytes), std::move(body), head, std::move(on_headers),
        std::move(on_chunk), std::move(on_done), timeout, std::move(options));
    core->exchanges.emplace(id, exchange);
  }
  net::dispatch(exchange->executor(), [exchange] { exchange->start(); });
}

}  // namespace

bool parse_host_port(std::string_view address, std::string& host, uint16_t& port) {
  constexpr std::string_view kScheme = "http://";
  if (address.substr(0, kScheme.size()) == kScheme) address.remove_prefix(kScheme.size());
  while (!address.empty() && address.back() == '/')
    address.remove_suffix(1);
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 ||
      address.find('/') != std::string_view::npos) {
    return false;  // no port, no host, or another scheme or a path
  }
  const std::string_view digits = address.substr(colon + 1);
  if (digits.empty() || digits.size() > 5 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return false;
  }
  const int p = std::stoi(std::string(digits));
  if (p < 1 || p > 65535) return false;
  std::string_view h = address.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  host = std::string(h);
  port = static_cast<uint16_t>(p);
  return true;
}

Client::Client(ClientLimits limits, const Clock& clock)
    : core_(std::make_shared<ClientCore>(limits, clock)) {
  core_->io_threads.start(core_->ioc, limits.io_threads);
}

Client::Client(ClientLimits limits, Server& server, const Clock& clock)
    : core_(std::make_shared<ClientCore>(limits, server.io_context(), server.io_threads(), clock)) {
}

void Client::shutdown() {
  auto& core = *core_;
  std::vector<std::shared_ptr<Exchange>> live;
  {
    std::lock_guard lock(core.exchanges_mu);
    if (core.stopping.exchange(true)) return;
    for (auto& [id, weak] : core.exchanges) {
      if (auto e = weak.lock()) live.push_back(std::move(e));
    }
  }
  for (auto& e : live)
    net::post(e->executor(), [e] { e->fail("client shut down"); });
  live.clear();
  {
    std::lock_guard lock(core.pool_mu);
    core.pool.clear();
  }
  core.work.reset();
}

Client::~Client() {
  auto& core = *core_;
  assert(!core.on_io_thread());
  shutdown();
  if (core.shared) return;  // the io_context's owner runs (or drops) what shutdown() posted
  core.io_threads.stop_and_join(core.ioc, std::chrono::seconds(2));
  for (int i = 0; i < 1000; ++i) {
    core.ioc.restart();
    if (core.ioc.poll() == 0) break;
  }
}

Result<ClientResponse> Client::request(const std::string& host, uint16_t port, std::string method,
                                       std::string target, std::string body, Headers headers,
                                       std::chrono::milliseconds timeout,
                                       std::optional<size_t> max_body_bytes,
                                       StreamOptions options) {
  if (core_->on_io_thread()) return Error{"Client::request called from the client's I/O thread"};
  struct State {
    ClientResponse response;
    bool too_large = false;
    std::promise<Status> done;
  };
  auto state = std::make_shared<State>();
  const size_t max_body =
      std::min(core_->limits.max_body_bytes, max_body_bytes.value_or(core_->limits.max_body_bytes));
  if (core_->stopping.load()) return Error{"client shut down"};
  // The caller's timeout bounds the whole exchange, the wait for the response's header included:
  // a longer one than limits.response_header_timeout (a weight update that drains running
  // requests first answers after minutes) is not cut by that limit.
  if (!options.response_header_timeout) {
    options.response_header_timeout = std::max(timeout, core_->limits.response_header_timeout);
  }
  start_exchange(
      core_, host, port, std::move(method), std::move(target), std::move(body), std::move(headers),
      [state](int status, const Headers& h) {
        state->response.status = status;
        state->response.headers = h;
      },
      [state, max_body](std::string_view bytes) {
        if (state->response.body.size() + bytes.size() > max_body) {
          state->too_large = true;
          return false;
        }
        state->response.body.append(bytes);
        return true;
      },
      [state](Status status) { state->done.set_value(std::move(status)); }, timeout,
      std::move(options));
  Status status = state->done.get_future().get();
  if (state->too_large) {
    return Error{"response body larger than " + std::to_string(max_body) + " bytes"};
  }
  if (!status.ok()) return Error{status.message()};
  return std::move(state->response);
}

void Client::stream(const std::string& host, uint16_t port, std::string method, std::string target,
                    Body body, Headers headers, OnHeaders on_headers, OnChunk on_chunk,
                    OnDone on_done, StreamOptions options) {
  if (core_->stopping.load()) {
    if (on_done) on_done(Error{"client shut down"});
    return;
  }
  start_exchange(core_, host, port, std::move(method), std::move(target), std::move(body),
                 std::move(headers), std::move(on_headers), std::move(on_chunk), std::move(on_done),
                 std::nullopt, std::move(options));
}

size_t Client::num_connects() const {
  return core_->num_connects.load();
}

}  // namespace kvc::http
