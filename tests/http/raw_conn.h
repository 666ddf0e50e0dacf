// A blocking POSIX TCP client for server tests that need to misbehave: partial headers, malformed
// request lines, not reading, disconnecting mid-stream. Every wait is bounded.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvc::http::testing {

struct RawResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool chunked = false;

  std::optional<std::string> header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n.size() != name.size()) continue;
      bool same = true;
      for (size_t i = 0; i < n.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(n[i])) !=
            std::tolower(static_cast<unsigned char>(name[i]))) {
          same = false;
        }
      }
      if (same) return v;
    }
    return std::nullopt;
  }
};

class RawConn {
 public:
  // rcvbuf > 0 shrinks the receive buffer before connecting (a client that reads slowly).
  explicit RawConn(uint16_t port, int rcvbuf = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawConn() { close(); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool connected() const { return connected_; }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Half-closes: no more bytes from this side (shutdown(SHUT_WR), as nc -N); reading goes on.
  void shutdown_send() { ::shutdown(fd_, SHUT_WR); }

  // The final response, skipping any interim 1xx before it; `interim` counts those.
  std::optional<RawResponse> read_final_response(
      int* interim = nullptr, std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
    for (int skipped = 0;; ++skipped) {
      std::optional<RawResponse> r = read_response(timeout);
      if (!r || r->status >= 200) {
        if (interim) *interim = skipped;
        return r;
      }
    }
  }

  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // One response (content-length, chunked, or until close); nullopt on timeout or early close.
  std::optional<RawResponse> read_response(
      std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    size_t header_end;
    while ((header_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill(deadline)) return std::nullopt;
    }
    RawResponse r;
    std::string head = buf_.substr(0, header_end);
    buf_.erase(0, header_end + 4);
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t end = head.find("\r\n", pos);
      if (end == std::string::npos) end = head.size();
      std::string line = head.substr(pos, end - pos);
      size_t colon = line.find(':');
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value[0] == ' ')
        value.erase(0, 1);
      r.headers.emplace_back(line.substr(0, colon), value);
      pos = end + 2;
    }
    if (auto te = r.header("transfer-encoding"); te && *te == "chunked") {
      r.chunked = true;
      for (;;) {
        size_t crlf;
        while ((crlf = buf_.find("\r\n")) == std::string::npos) {
          if (!fill(deadline)) return std::nullopt;
        }
        size_t size = std::stoul(buf_.substr(0, crlf), nullptr, 16);
        while (buf_.size() < crlf + 2 + size + 2) {
          if (!fill(deadline)) return std::nullopt;
        }
        r.body += buf_.substr(crlf + 2, size);
        buf_.erase(0, crlf + 2 + size + 2);
        if (size == 0) break;
      }
    } else if (auto cl = r.header("content-length")) {
      size_t size = std::stoul(*cl);
      while (buf_.size() < size) {
        if (!fill(deadline)) return std::nullopt;
      }
      r.body = buf_.substr(0, size);
      buf_.erase(0, size);
    }
    return r;
  }

  // Reads (and discards) until the server closes; false if still open at the timeout.
  bool wait_closed(std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int r = wait_readable(deadline);
      if (r <= 0) return false;
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) return true;
    }
  }

  // Reads whatever arrives within the timeout (no parsing).
  std::string read_some(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    fill(deadline);
    return std::exchange(buf_, {});
  }

 private:
  int wait_readable(std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(left.count()));
  }

  bool fill(std::chrono::steady_clock::time_point deadline) {
    if (wait_readable(deadline) <= 0) return false;
    char tmp[16384];
    ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buf_;
};

}  // namespace kvc::http::testing
