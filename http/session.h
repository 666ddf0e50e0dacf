// The server side of one connection (private to http/): the server core every session shares,
// the state of one exchange, and the Session that reads requests, hands each to the handler
// with a Responder (http/responder.h) and writes what the responder produces. The listener
// (listener.cc) accepts connections and makes sessions.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cassert>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "http/deadline.h"
#include "http/errors.h"
#include "http/server.h"
#include "http/wire.h"

namespace kvc::http {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

class Session;

struct ServerCore {
  ServerCore(ServerLimits l, Handler h, int threads)
      : limits(l), handler(std::move(h)), threads(std::max(1, threads)), ioc(this->threads) {}

  const ServerLimits limits;
  const Handler handler;
  // Threads running ioc. With one, handlers never run concurrently: a session needs no strand
  // (connection_executor), and Asio's scheduler, told so by its concurrency hint, queues what a
  // handler posts without its lock.
  const int threads;
  net::io_context ioc;
  net::executor_work_guard<net::io_context::executor_type> work = net::make_work_guard(ioc);
  net::strand<net::io_context::executor_type> accept_strand = net::make_strand(ioc);
  tcp::acceptor acceptor{accept_strand};
  net::steady_timer accept_backoff{accept_strand};

  std::atomic<bool> stopping{false};
  std::atomic<bool> drained{false};  // no thread runs the io_context any more: do not post
  std::atomic<size_t> num_serving{0};
  std::atomic<size_t> num_probing{0};  // probe-only connections (ServerLimits::probe_connections)
  std::atomic<size_t> num_accepted{0};

  std::mutex sessions_mu;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_session_id = 0;

  wire::IoThreads io_threads;
  bool on_io_thread() const { return io_threads.on_io_thread(); }

  // The executor a new connection's handlers run on (wire::one_at_a_time).
  net::any_io_executor connection_executor() { return wire::one_at_a_time(ioc, threads); }
};

// A request body as a std::string, read the way a large JSON body wants it: the declared length
// (and kRequestBodyPadding beyond it) reserved at once, the bytes appended as they arrive (Beast's
// string_body resizes first, zero-filling what it then copies over). The padding lets the JSON
// parser read the body in place (api/openai_request.h JsonBody).
inline constexpr size_t kRequestBodyPadding = 64;
struct RequestBody {
  using value_type = std::string;
  static std::uint64_t size(const value_type& body) { return body.size(); }

  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(bhttp::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>& length, error_code& ec) {
      ec = {};
      if (!length) return;
      if (*length > body_.max_size() - kRequestBodyPadding) {
        ec = bhttp::error::buffer_overflow;
        return;
      }
      body_.reserve(static_cast<size_t>(*length) + kRequestBodyPadding);
    }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, error_code& ec) {
      ec = {};
      size_t n = 0;
      for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers);
           ++it) {
        const net::const_buffer b = *it;
        body_.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      return n;
    }
    void finish(error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};

// Why a request's framing is refused (RFC 9112 6.3), or nullopt: several Content-Length or
// Transfer-Encoding fields, a Transfer-Encoding other than chunked, or both.
std::optional<std::string> framing_error(const bhttp::request<RequestBody>& msg);

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

// How an accepted connection is taken: served, served for health probes only (beyond
// max_connections), or refused with a 503.
enum class Admission { kServe, kProbesOnly, kRefuse };

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::shared_ptr<ServerCore> core, tcp::socket socket, uint64_t id, Admission admission)
      : core_(std::move(core)),
        id_(id),
        serving_(admission == Admission::kServe),
        probes_only_(admission == Admission::kProbesOnly),
        socket_(std::move(socket)),
        ex_(socket_.get_executor()),
        read_deadline_(ex_),
        write_deadline_(ex_),
        probe_timer_(ex_),
        buffer_(core_->limits.max_header_bytes + kReadChunk) {
    error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
    if (serving_) core_->num_serving.fetch_add(1);
    if (probes_only_) core_->num_probing.fetch_add(1);
  }

  ~Session() {
    if (serving_ && !closed_) core_->num_serving.fetch_sub(1);
    if (probes_only_ && !closed_) core_->num_probing.fetch_sub(1);
  }

  const net::any_io_executor& executor() const { return ex_; }
  ServerCore& core() { return *core_; }

  // On the session's executor.
  void start() { read_request(); }

  // On the session's executor: refuse the connection (max_connections) with a 503 and close.
  void reject() { reply_error_and_close(503, kTooMany, "server_error"); }

  // From any thread (a responder): output for exchange `exchange`, or its abort(), taken in the
  // order of the calls. They wait in the session's inbox, which one task on the session's
  // executor empties: the executor alone would not keep them in order when two threads post (with
  // one I/O thread, what it posts waits in its private queue while another thread's post may run
  // first: a stream's first chunk from the engine thread went out before its head).
  void post_output(uint64_t exchange, std::string bytes, bool last) {
    push_output({exchange, std::move(bytes), last, /*abort=*/false});
  }
  void post_abort(uint64_t exchange) { push_output({exchange, {}, false, /*abort=*/true}); }

  // On the session's executor. Closes the socket at once; an unfinished exchange sees
  // client_gone().
  void close() {
    if (closed_) return;
    closed_ = true;
    phase_ = Phase::kClosed;
    read_deadline_.cancel();
    write_deadline_.cancel();
    probe_timer_.cancel();
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    out_queue_.clear();
    if (serving_) core_->num_serving.fetch_sub(1);
    if (probes_only_) core_->num_probing.fetch_sub(1);
    {
      std::lock_guard lock(core_->sessions_mu);
      core_->sessions.erase(id_);
    }
    if (current_) std::exchange(current_, nullptr)->mark_gone();
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kLinger, kClosed };
  static constexpr size_t kReadChunk = 16 << 10;

  // On the session's executor: output for exchange `exchange`.
  void enqueue(uint64_t exchange, std::string bytes, bool last) {
    queue_output(exchange, std::move(bytes), last);
    write_more();
  }

  // On the session's executor, from a responder's post_abort: the response cannot be completed
  // (abandoned mid stream). What it wrote so far still goes out (the client sees a truncated body),
  // then the connection closes with no terminal chunk.
  void abort(uint64_t exchange) {
    if (closed_ || exchange != exchange_id_) return;
    close_when_written_ = true;
    response_done_ = true;  // nothing more is queued
    if (!writing_ && out_queue_.empty()) close();
  }

  struct Output {
    uint64_t exchange = 0;
    std::string bytes;
    bool last = false;
    bool abort = false;
  };

  void push_output(Output output) {
    {
      std::lock_guard lock(inbox_mu_);
      inbox_.push_back(std::move(output));
      if (drain_posted_) return;
      drain_posted_ = true;
    }
    net::post(ex_, [self = shared_from_this()] { self->drain_inbox(); });
  }

  // On the session's executor: what responders posted, in order, then one write of all of it.
  void drain_inbox() {
    {
      std::lock_guard lock(inbox_mu_);
      draining_.swap(inbox_);  // both keep their capacity: no allocation per response
      drain_posted_ = false;
    }
    for (Output& o : draining_) {
      if (o.abort) {
        abort(o.exchange);
      } else {
        queue_output(o.exchange, std::move(o.bytes), o.last);
      }
    }
    draining_.clear();
    write_more();
  }

  void queue_output(uint64_t exchange, std::string bytes, bool last) {
    if (closed_ || exchange != exchange_id_ || response_done_) return;
    if (!bytes.empty()) {
      response_started_ = true;
      out_queue_.push_back(std::move(bytes));
    }
    if (last) response_done_ = true;
  }

  const ServerLimits& limits() const { return core_->limits; }

  // Deadline for the current read phase; on expiry the pending read is cancelled and its handler
  // sees read_timed_out_.
  void arm_read_timer(std::chrono::milliseconds timeout) {
    read_deadline_.arm(timeout, [self = shared_from_this()] {
      if (self->closed_) return;
      self->read_timed_out_ = true;
      if (self->phase_ == Phase::kLinger || self->phase_ == Phase::kIdle) {
        self->close();
        return;
      }
      error_code ignored;
      self->socket_.cancel(ignored);
    });
  }

  void disarm_read_timer() { read_deadline_.clear(); }

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(
        std::min<size_t>(limits().max_header_bytes, std::numeric_limits<uint32_t>::max())));
    parser_->body_limit(limits().max_body_bytes);
    if (read_eof_) {
      // The client sent FIN: no request can come beyond what is buffered (pipelined before it).
      if (buffer_.size() == 0) return close();
      return read_buffered_request();
    }
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

  // A request pipelined before the client's FIN, parsed from the buffer. No async read may be
  // issued once a read saw the end of stream: Asio's epoll reactor then waits for a readiness
  // edge that already came and went (the read would hang until its timer). The blocking forms
  // never wait here: what the buffer lacks, the socket answers with end of stream at once (an
  // incomplete request is then a partial message, and the connection closes).
  void read_buffered_request() {
    phase_ = Phase::kHeader;
    error_code ec;
    bhttp::read_header(socket_, buffer_, *parser_, ec);
    if (ec) return on_read_error(ec);
    if (std::optional<std::string> why = framing_error(parser_->get())) {
      return reply_error_and_close(400, *why);
    }
    phase_ = Phase::kBody;
    bhttp::read(socket_, buffer_, *parser_, ec);
    if (ec) return on_read_error(ec);
    dispatch();
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
    if (limits().on_response) limits().on_response(status);
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
  // a client that goes away (a reset) is noticed before a write fails. Pipelined bytes are kept
  // for the next request, up to the buffer's bound; beyond it the watch pauses. End of stream
  // while a request is being answered is not "gone": a client may half-close its sending side
  // once its request is out (nc -N, some HTTP/1.0 clients and load balancers), and a fully
  // received request is answered (probe_half_closed tells the two kinds of FIN apart), as is
  // every request pipelined before the FIN; then the connection closes (read_request). After
  // the FIN no read is issued (read_eof_).
  void watch() {
    if (closed_ || watching_ || read_eof_) return;
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
      if (ec == net::error::eof) {
        read_eof_ = true;  // read_request answers what was pipelined before the FIN, then closes
      } else if (ec && ec != net::error::operation_aborted) {
        return close();
      }
      read_request();
      return;
    }
    if (ec == net::error::eof && phase_ == Phase::kHandling) {
      read_eof_ = true;  // no more reads; once answered, the connection closes (read_request)
      probe_half_closed(false);
      return;
    }
    if (ec) return close();
    watch();
  }

  // The client sent FIN while its request is being answered: it half-closed, or it closed and
  // left. TCP tells the two apart only when something is sent: a closed peer answers with a
  // reset, and the write after that fails (close(): the exchange sees client_gone()). Until the
  // response's first bytes are written (they and every later write probe on their own), an
  // HTTP/1.1 exchange is sent an interim "100 Continue" every half_close_probe_interval (the
  // first after one interval: a quick response goes out without any), which clients skip
  // (RFC 9110 15.2: any number of 1xx may precede the final response). HTTP/1.0 clients may not
  // be sent 1xx: theirs is noticed when the response is written.
  void probe_half_closed(bool send) {
    if (closed_ || !read_eof_ || response_started_ || !exchange_http11_ ||
        phase_ != Phase::kHandling) {
      return;
    }
    if (send) {
      out_queue_.emplace_back(kContinue);
      write_more();
    }
    const uint64_t exchange = exchange_id_;
    probe_timer_.expires_after(limits().half_close_probe_interval);
    probe_timer_.async_wait([self = shared_from_this(), exchange](error_code ec) {
      if (!ec && exchange == self->exchange_id_) self->probe_half_closed(true);
    });
  }

  void write_more() {
    if (writing_ || closed_) return;
    if (out_queue_.empty()) {
      if (close_when_written_) return close();
      if (response_done_ && phase_ == Phase::kHandling) on_response_complete();
      return;
    }
    writing_ = true;
    while (!out_queue_.empty() && in_flight_.size() < limits().max_queued_writes_per_send) {
      in_flight_.push_back(std::move(out_queue_.front()));
      out_queue_.pop_front();
    }
    std::vector<net::const_buffer> buffers;
    buffers.reserve(in_flight_.size());
    for (const auto& s : in_flight_)
      buffers.push_back(net::buffer(s));
    // a client that does not read is cut
    write_deadline_.arm(limits().write_timeout, [self = shared_from_this()] { self->close(); });
    net::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, size_t) {
      self->writing_ = false;
      self->write_deadline_.clear();
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
    if (read_eof_) return close();  // the client sent FIN: nothing more is coming to drain
    phase_ = Phase::kLinger;
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    arm_read_timer(std::min(limits().read_timeout, limits().linger_timeout));
    watch();
  }

  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  static constexpr const char* kTooMany = "server has too many connections";

  std::shared_ptr<ServerCore> core_;  // first: destroyed last, after the socket and timers
  const uint64_t id_;
  const bool serving_;
  const bool probes_only_;  // Admission::kProbesOnly
  tcp::socket socket_;
  net::any_io_executor ex_;  // ServerCore::connection_executor(): its strand, or the one thread's
  Deadline read_deadline_;
  Deadline write_deadline_;
  net::steady_timer probe_timer_;  // probe_half_closed
  bool read_timed_out_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<RequestBody>> parser_;
  std::string remote_;
  Phase phase_ = Phase::kHeader;
  bool closed_ = false;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  // A read saw the client's FIN (it half-closed or left): no further read may be issued (see
  // read_buffered_request); what it pipelined before is answered, then the connection closes.
  bool read_eof_ = false;
  uint64_t num_served_ = 0;

  // the exchange being answered
  uint64_t exchange_id_ = 0;
  std::shared_ptr<ExchangeState> current_;
  bool keep_alive_ = false;
  bool exchange_http11_ = false;   // interim responses may be sent
  bool response_started_ = false;  // the responder queued bytes of this exchange
  bool response_done_ = false;
  std::deque<std::string> out_queue_;
  std::mutex inbox_mu_;  // push_output: responders' output on its way to the executor
  std::vector<Output> inbox_;
  bool drain_posted_ = false;
  std::vector<Output> draining_;  // drain_inbox's, on the session's executor
  std::vector<std::string> in_flight_;
  bool writing_ = false;
  bool close_when_written_ = false;  // abort(): close once the queued bytes are out
};

}  // namespace kvc::http
