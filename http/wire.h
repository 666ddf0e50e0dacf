// HTTP/1.1 wire formatting shared by the server's responses and the client's requests. Internal to
// http/ (not part of the public API).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include "http/server.h"

namespace kvc::http::wire {

// Header names/values from callers go onto the wire verbatim; one with CR, LF or NUL would split
// the message, so it is dropped.
bool header_is_safe(std::string_view name, std::string_view value);

bool iequals(std::string_view a, std::string_view b);

// "HTTP/1.1 200 OK\r\n"
std::string status_line(int status);

// Statuses whose responses never carry a body (1xx, 204, 304).
bool status_has_no_body(int status);

// One chunk of chunked transfer encoding; precondition: !data.empty().
std::string chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// The executor one connection's (or exchange's) handlers run on, one at a time: a strand of its
// own when several threads run `ioc`, else ioc's (one thread already runs them one at a time, and
// a strand per connection costs an allocation, a lock per handler and a second queue;
// bench/results/router.md, twenty-seventh session).
inline boost::asio::any_io_executor one_at_a_time(boost::asio::io_context& ioc, int threads) {
  if (threads == 1) return ioc.get_executor();
  return boost::asio::make_strand(ioc);
}

// The I/O threads of a server or client core: each runs the io_context until it stops,
// surviving callbacks that throw (one bad exchange must not take the others down).
class IoThreads {
 public:
  void start(boost::asio::io_context& ioc, int count) {
    std::lock_guard lock(mu_);
    for (int i = 0; i < std::max(1, count); ++i) {
      ++running_;
      threads_.emplace_back([this, &ioc] { run(ioc); });
      ids_.push_back(threads_.back().get_id());
    }
  }
  bool on_io_thread() const {
    const auto self = std::this_thread::get_id();
    return std::find(ids_.begin(), ids_.end(), self) != ids_.end();
  }
  // Waits up to `grace` for the threads to run out of work, then stops the io_context, and
  // joins them. Joins without the lock: an exiting thread takes it to count itself out.
  void stop_and_join(boost::asio::io_context& ioc, std::chrono::milliseconds grace) {
    {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, grace, [&] { return running_ == 0; })) ioc.stop();
    }
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void run(boost::asio::io_context& ioc) {
    for (;;) {
      try {
        ioc.run();
        break;
      } catch (...) {
      }
    }
    std::lock_guard lock(mu_);
    --running_;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::vector<std::thread::id> ids_;
  int running_ = 0;
};

}  // namespace kvc::http::wire
