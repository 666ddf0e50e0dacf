// RouterServer::ProxiedRequest: one client request on its way to a replica (router/proxy.h's
// private part, shared by proxy.cc, which makes and routes it, and proxied_request.cc, which
// chooses, sends, relays and retries).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "http/client.h"
#include "router/proxy.h"

namespace kvc {

// A non-streaming answer up to this size is buffered and sent whole; past it, streamed through.
constexpr size_t kMaxBufferedBody = size_t{8} << 20;

// One client request on its way to a replica, possibly over several tries: choose a replica
// (do_choose), send it there (do_try), relay its answer (on_headers, on_chunk) and, when it ends
// (on_done), finish, retry on another replica or end with an error. Callbacks hold it by
// shared_ptr; it holds nothing that holds it.
class RouterServer::ProxiedRequest : public std::enable_shared_from_this<ProxiedRequest> {
 public:
  explicit ProxiedRequest(RouterServer& server) : s_(server) {}

  // Ends the exchange in flight as soon as the client leaves.
  void watch_client();
  // Chooses the first replica and sends; false: none is healthy (nothing was sent).
  bool start();

  http::Request request;     // its body moved to upstream_body
  http::Body upstream_body;  // the client's body, shared by every try (never copied)
  std::shared_ptr<http::Responder> responder;
  bool stream = false;
  std::vector<BlockHash> hashes;
  std::string sibling_key;
  std::vector<Candidate> candidates;
  // Candidates whose admission an operator paused (ReplicaView::paused): left out while another
  // can take the request (do_choose).
  std::vector<uint32_t> paused;
  RouteRequest route;  // its blocks view `hashes`
  std::vector<uint32_t> tried;
  uint32_t replica = 0;
  std::string replica_id, reason;
  std::string route_detail;  // the policy's RouteDecision::detail (debug headers only)
  size_t matched_bytes = 0;
  bool debug_headers = false;  // RouterConfig::debug_headers
  bool sent_anything = false;  // bytes reached the client: no more retries
  int status = 0;
  // This try's answer was late: no response header, or a body gone silent, within its timeout
  // after the request was written (http::StreamOptions::on_timeout).
  bool timed_out = false;
  // A non-streaming request's response is buffered and sent whole (one hand-off to the client's
  // session instead of one per piece, and a replica failing mid-body can still be retried); past
  // kMaxBufferedBody it is streamed through.
  std::string content_type;
  std::optional<std::string> weight_version;  // the replica's x-kvcascade-weight-version
  std::string body;
  Clock::TimePoint begun{};
  size_t prompt_bytes = 0;
  std::optional<std::string> routing_key;  // RouterConfig::routing_key_header
  // This try's uncached prompt tokens, pending at the replica until its answer starts
  // (ReplicaView::pending_prefill_tokens); 0 once handed back.
  int64_t pending_prefill = 0;
  // The work the policy counted for this try (Policy::record), in the replica's routed work
  // until a load report has it (ReplicaPool::note_routed_work); its id there (0: none).
  double counted_work = 0;
  uint64_t counted_work_id = 0;

 private:
  bool do_choose();
  void do_try();
  void on_headers(int upstream_status, const http::Headers& upstream);
  bool on_chunk(std::string_view bytes);
  void on_done(const Status& s, const std::shared_ptr<http::Cancellation>& cancellation,
               int64_t prompt_size);
  void prefill_started();
  void count_route();
  void start_client_stream();
  http::Headers client_headers() const;

  RouterServer& s_;
  // Shared with the client-gone callback, which may run on another thread.
  std::mutex mu_;
  bool abandoned_ = false;                            // the client left: no more tries
  std::shared_ptr<http::Cancellation> cancellation_;  // ends the try in flight
};

}  // namespace kvc
