#include "bench/loadgen.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

namespace kvc::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// One keep-alive HTTP/1.1 connection with blocking I/O. It writes a prepared request and reads one
// response (Content-Length or chunked framing), so that the client's own cost is small and the
// same for every target.
class RawConnection {
 public:
  ~RawConnection() { close_fd(); }
  bool connect_to(const Endpoint& e, int timeout_s) {
    close_fd();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &found) != 0) {
      return false;
    }
    for (addrinfo* a = found; a != nullptr && fd_ < 0; a = a->ai_next) {
      fd_ = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd_ < 0) continue;
      const int one = 1;
      setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      timeval tv{timeout_s, 0};  // a dead peer must not hang the run
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
      if (connect(fd_, a->ai_addr, a->ai_addrlen) != 0) close_fd();
    }
    freeaddrinfo(found);
    buf_.clear();
    return fd_ >= 0;
  }
  bool connected() const { return fd_ >= 0; }

  struct Response {
    int status = 0;  // 0: I/O or framing error (the connection is then closed)
    Clock::time_point first_byte{};
    std::string body;  // kept only when asked
  };
  Response exchange(const std::string& request, bool keep_body) {
    Response r;
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return fail();
      sent += static_cast<size_t>(n);
    }
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return fail();
    }
    std::string head = buf_.substr(0, head_end);
    buf_.erase(0, head_end + 4);
    if (head.size() < 12 || head.compare(0, 5, "HTTP/") != 0) return fail();
    r.status = std::atoi(head.c_str() + 9);
    std::transform(head.begin(), head.end(), head.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    auto body_bytes = [&](size_t n) {
      if (r.first_byte == Clock::time_point{} && n > 0) r.first_byte = Clock::now();
      if (keep_body) r.body.append(buf_, 0, n);
      buf_.erase(0, n);
    };
    // Transfer-Encoding wins over Content-Length (RFC 9112 6.3); 1xx, 204 and 304 have no body.
    if ((r.status >= 100 && r.status < 200) || r.status == 204 || r.status == 304) {
      // nothing to read
    } else if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (!fill()) return fail();
        }
        const size_t size = std::strtoull(buf_.c_str(), nullptr, 16);
        if (size > 0 && r.first_byte == Clock::time_point{}) r.first_byte = Clock::now();
        while (buf_.size() < eol + 2 + size + 2) {
          if (!fill()) return fail();
        }
        buf_.erase(0, eol + 2);
        body_bytes(size);
        buf_.erase(0, 2);
        if (size == 0) break;  // trailers are not used by kvcascade or nginx here
      }
    } else if (const size_t cl = head.find("\r\ncontent-length:"); cl != std::string::npos) {
      const size_t len = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
      while (buf_.size() < len) {
        if (!buf_.empty() && r.first_byte == Clock::time_point{}) r.first_byte = Clock::now();
        if (!fill()) return fail();
      }
      body_bytes(len);
    } else {
      return fail();  // every server here frames its bodies
    }
    if (r.first_byte == Clock::time_point{}) r.first_byte = Clock::now();
    if (head.find("\r\nconnection: close") != std::string::npos) close_fd();
    return r;
  }

 private:
  bool fill() {
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  Response fail() {
    close_fd();
    return {};
  }
  void close_fd() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::string buf_;
};

// Completion tokens of a non-streaming response, SSE data events of a streaming one.
void inspect(const std::string& body, LoadStats& s) {
  if (body.compare(0, 5, "data:") == 0 || body.find("\ndata:") != std::string::npos) {
    for (size_t at = 0; (at = body.find("data:", at)) != std::string::npos; at += 5) {
      if (body.compare(at, 12, "data: [DONE]") != 0) ++s.stream_events;
    }
    return;
  }
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("usage") && j["usage"].is_object()) {
    s.completion_tokens += j["usage"].value("completion_tokens", int64_t{0});
  }
}

}  // namespace

std::vector<std::string> prepare_requests(const Workload& w) {
  std::vector<std::string> out;
  const bool chat = w.path.find("/chat/") != std::string::npos;
  for (int q = 0; q < std::max(1, w.questions); ++q) {
    for (int t = 0; t < std::max(1, w.tenants); ++t) {
      std::string prefix = "You are the assistant of tenant " + std::to_string(t) + ". ";
      while (static_cast<int>(prefix.size()) < w.prompt_bytes)
        prefix += "Answer tenant " + std::to_string(t) + "'s questions precisely and briefly. ";
      prefix.resize(static_cast<size_t>(std::max(0, w.prompt_bytes)));
      const std::string question =
          " Question " + std::to_string(q) + ": what is " + std::to_string(q * 7 + t) + "?";
      json body = {{"model", w.model}, {"max_tokens", w.max_tokens}, {"n", w.n}};
      if (w.stream) body["stream"] = true;
      if (w.ignore_eos) body["ignore_eos"] = true;
      if (chat) {
        body["messages"] = {{{"role", "system"}, {"content", prefix}},
                            {{"role", "user"}, {"content", question}}};
      } else {
        body["prompt"] = prefix + question;
      }
      const std::string b = body.dump();
      std::string r = "POST " + w.path + " HTTP/1.1\r\nHost: " + w.host +
                      "\r\nContent-Type: application/json\r\n";
      if (!w.api_key.empty()) r += "Authorization: Bearer " + w.api_key + "\r\n";
      r += "Content-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b;
      out.push_back(std::move(r));
    }
  }
  return out;
}

double LoadStats::percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0.0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

json LoadStats::to_json() const {
  json statuses_json = json::object();
  for (const auto& [status, n] : statuses)
    statuses_json[std::to_string(status)] = n;
  return {{"target", target},
          {"concurrency", concurrency},
          {"seconds", seconds},
          {"requests", ok},
          {"errors", errors},
          {"statuses", statuses_json},
          {"rps", rps()},
          {"p50_ms", percentile(latency_ms, 0.50)},
          {"p90_ms", percentile(latency_ms, 0.90)},
          {"p99_ms", percentile(latency_ms, 0.99)},
          {"first_byte_p50_ms", percentile(first_byte_ms, 0.50)},
          {"first_byte_p99_ms", percentile(first_byte_ms, 0.99)},
          {"completion_tokens", completion_tokens},
          {"completion_tokens_per_s", seconds > 0 ? completion_tokens / seconds : 0.0},
          {"stream_events", stream_events}};
}

bool can_connect(const Endpoint& e) {
  RawConnection c;
  return c.connect_to(e, 5);
}

LoadStats run_closed_loop(const std::string& target, const std::vector<Endpoint>& endpoints,
                          int concurrency, double seconds, const std::vector<std::string>& requests,
                          bool inspect_bodies, int timeout_s) {
  LoadStats result;
  result.target = target;
  result.concurrency = concurrency;
  result.seconds = seconds;
  if (endpoints.empty() || requests.empty() || concurrency <= 0) return result;
  const auto warm =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds * 0.1));
  const auto span =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<LoadStats> per(static_cast<size_t>(concurrency));
  Clock::time_point begin, end;
  std::barrier sync(concurrency, [&]() noexcept {
    begin = Clock::now() + warm;
    end = begin + span;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      LoadStats& mine = per[static_cast<size_t>(t)];
      const Endpoint& endpoint = endpoints[static_cast<size_t>(t) % endpoints.size()];
      RawConnection conn;
      size_t next = static_cast<size_t>(t) * 7919;
      sync.arrive_and_wait();
      for (;;) {
        const Clock::time_point start = Clock::now();
        if (start >= end) break;
        if (!conn.connected() && !conn.connect_to(endpoint, timeout_s)) {
          if (start >= begin) ++mine.errors, ++mine.statuses[0];
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        const RawConnection::Response r =
            conn.exchange(requests[next++ % requests.size()], inspect_bodies);
        const Clock::time_point done = Clock::now();
        if (r.status != 0) ++mine.exchanges;
        if (start < begin || done > end) continue;
        ++mine.statuses[r.status];
        if (r.status >= 200 && r.status < 300) {
          ++mine.ok;
          mine.latency_ms.push_back(
              std::chrono::duration<double, std::milli>(done - start).count());
          mine.first_byte_ms.push_back(
              std::chrono::duration<double, std::milli>(r.first_byte - start).count());
          if (inspect_bodies) inspect(r.body, mine);
        } else {
          ++mine.errors;
        }
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  for (LoadStats& r : per) {
    result.ok += r.ok;
    result.exchanges += r.exchanges;
    result.errors += r.errors;
    for (const auto& [status, n] : r.statuses)
      result.statuses[status] += n;
    result.latency_ms.insert(result.latency_ms.end(), r.latency_ms.begin(), r.latency_ms.end());
    result.first_byte_ms.insert(result.first_byte_ms.end(), r.first_byte_ms.begin(),
                                r.first_byte_ms.end());
    result.completion_tokens += r.completion_tokens;
    result.stream_events += r.stream_events;
  }
  return result;
}

}  // namespace kvc::bench
