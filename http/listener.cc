// The listener: accepts connections on the server's strand (backing off when out of
// descriptors), makes a Session for each, and runs and stops the server (http/server.h).
#include "http/server.h"

#include "base/hex.h"
#include "http/session.h"

namespace kvc::http {

// stop(): rounds of running what closed sockets left queued (each round runs what is ready).
constexpr int kMaxDrainPolls = 1000;

std::optional<std::string_view> query_param(std::string_view target, std::string_view name) {
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name)
      return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return std::nullopt;
}

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

std::optional<std::string> path_rest_decoded(std::string_view path, std::string_view prefix) {
  if (path.size() <= prefix.size() || path.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string out;
  for (size_t i = prefix.size(); i < path.size(); ++i) {
    if (path[i] != '%') {
      out += path[i];
      continue;
    }
    if (i + 2 >= path.size()) return std::nullopt;  // a cut escape
    const int hi = hex_digit(path[i + 1]), lo = hex_digit(path[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

namespace {

void do_accept(const std::shared_ptr<ServerCore>& core);

void on_accept(const std::shared_ptr<ServerCore>& core, error_code ec, tcp::socket socket) {
  if (core->stopping.load() || ec == net::error::operation_aborted) return;
  if (ec) {
    // e.g. out of file descriptors: back off instead of spinning
    core->accept_backoff.expires_after(core->limits.accept_backoff);
    core->accept_backoff.async_wait([core](error_code ec) {
      if (!ec) do_accept(core);
    });
    return;
  }
  core->num_accepted.fetch_add(1);
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  const Admission admission =
      core->num_serving.load() < core->limits.max_connections     ? Admission::kServe
      : core->num_probing.load() < core->limits.probe_connections ? Admission::kProbesOnly
                                                                  : Admission::kRefuse;
  const bool serving = admission != Admission::kRefuse;
  std::shared_ptr<Session> session;
  {
    std::lock_guard lock(core->sessions_mu);
    uint64_t id = core->next_session_id++;
    session = std::make_shared<Session>(core, std::move(socket), id, admission);
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
      core->connection_executor(),
      [core](error_code ec, tcp::socket socket) { on_accept(core, ec, std::move(socket)); });
}

}  // namespace

Server::Server(ServerLimits limits, Handler handler, int threads)
    : core_(std::make_shared<ServerCore>(limits, std::move(handler), threads)) {
  assert(core_->handler);
  core_->io_threads.start(core_->ioc, core_->threads);
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
  core->io_threads.stop_and_join(core->ioc, core->limits.stop_grace);
  // Run what is left (completions of closed sockets) so no handler keeps a session alive; a
  // responder still held by the engine keeps its session, which no longer posts anything.
  for (int i = 0; i < kMaxDrainPolls; ++i) {
    core->ioc.restart();
    if (core->ioc.poll() == 0) break;
  }
  core->drained.store(true);
  for (int i = 0; i < kMaxDrainPolls; ++i) {
    core->ioc.restart();
    if (core->ioc.poll() == 0) break;
  }
}

boost::asio::io_context& Server::io_context() {
  return core_->ioc;
}

int Server::io_threads() const {
  return core_->threads;
}

size_t Server::num_connections() const {
  return core_->num_serving.load();
}

size_t Server::num_accepted() const {
  return core_->num_accepted.load();
}

size_t Server::num_probe_connections() const {
  return core_->num_probing.load();
}

}  // namespace kvc::http
