// RouterServer::ProxiedRequest's tries: choose a replica, send, relay its answer, retry or end.
#include "router/proxied_request.h"

#include <algorithm>
#include <span>

#include "http/errors.h"
#include "http/sse.h"
#include "router/fleet/replica_auth.h"

namespace kvc {

void RouterServer::ProxiedRequest::watch_client() {
  // A client that leaves ends the exchange in flight at once: the replica sees the connection
  // close and frees the group. (A non-streaming reply sends no byte before the generation is done,
  // so waiting for one to find the client gone would let the replica generate to the end.)
  responder->on_client_gone([weak = weak_from_this()] {
    auto a = weak.lock();
    if (!a) return;
    std::shared_ptr<http::Cancellation> in_flight;
    {
      std::lock_guard lock(a->mu_);
      a->abandoned_ = true;
      in_flight = a->cancellation_;
    }
    if (in_flight) in_flight->cancel("the client went away");
  });
}

bool RouterServer::ProxiedRequest::start() {
  if (!do_choose()) return false;
  do_try();
  return true;
}

// Chooses among the candidates not tried yet (health re-read on a retry): an explicit routing
// key first, then a sibling pin (policies that keep siblings together), then the policy.
// A paused replica (POST /v1/admin/pause: it admits nothing until resumed) is left out while
// another candidate can take the request, which would otherwise wait there; the replica a group
// was placed on stays eligible (its members start together, on one version). With every healthy
// candidate paused the request goes to one and waits there, as it always did.
bool RouterServer::ProxiedRequest::do_choose() {
  std::vector<ReplicaView> now;
  if (!tried.empty()) now = s_.pool_.snapshot();  // a retry: health may have changed
  for (Candidate& c : candidates) {
    if (std::find(tried.begin(), tried.end(), c.replica) != tried.end()) c.healthy = false;
    if (!now.empty()) {
      auto it = std::find_if(now.begin(), now.end(), [&](auto& v) { return v.index == c.replica; });
      c.healthy = c.healthy && it != now.end() && it->healthy;
    }
  }
  if (std::none_of(candidates.begin(), candidates.end(), [](auto& c) { return c.healthy; })) {
    return false;
  }
  if (!now.empty()) {  // a retry: pauses may have changed too
    paused.clear();
    for (const ReplicaView& v : now)
      if (v.paused) paused.push_back(v.index);
  }
  auto is_paused = [&](const Candidate& c) {
    return std::find(paused.begin(), paused.end(), c.replica) != paused.end();
  };
  // What this choice may take: the candidates, less the paused ones while others can serve
  // (then a copy: a retry decides again; none is made while nothing is paused).
  std::vector<Candidate> unpaused_copy;
  std::span<const Candidate> open = candidates;
  RouteDecision d;
  const Candidate* chosen = nullptr;  // in `open`
  {
    std::lock_guard lock(s_.policy_mu_);  // the policy's state and the sibling tracker
    const bool pins = s_.policy_->pins_siblings();
    std::optional<uint32_t> pin;
    if (!routing_key && pins) pin = s_.siblings_.lookup(sibling_key);
    const bool unpaused = !paused.empty() && std::any_of(candidates.begin(), candidates.end(),
                                                         [&](const Candidate& c) {
                                                           return c.healthy && !is_paused(c);
                                                         });
    if (unpaused) {
      unpaused_copy = candidates;
      for (Candidate& c : unpaused_copy) {
        const bool group_home = route.group && pin == c.replica;
        if (is_paused(c) && !group_home) c.healthy = false;
      }
      open = unpaused_copy;
    }
    bool decided = false;
    if (routing_key) {
      d = route_by_key(*routing_key, open);
      decided = true;
    } else if (pin) {
      for (const Candidate& c : open) {
        if (c.replica == *pin && c.healthy) {
          d = {c.replica, "sibling_pinned"};
          decided = true;
        }
      }
    }
    if (!decided) {
      d = s_.policy_->choose(route, open);
      if (pins) s_.siblings_.record(sibling_key, d.replica);
    }
    const Candidate* previous = nullptr;  // a retry: the replica whose try failed
    for (const Candidate& c : open) {
      if (c.replica == d.replica) chosen = &c;
      if (!tried.empty() && c.replica == tried.back()) previous = &c;
    }
    if (previous != nullptr) {
      counted_work = s_.policy_->retried(route, *previous, *chosen);
    } else {
      counted_work = s_.policy_->record(route, *chosen);
    }
  }
  if (!tried.empty()) d.reason = "retry";
  replica = d.replica;
  reason = d.reason;
  route_detail = std::move(d.detail);
  replica_id = chosen->id;
  matched_bytes = chosen->matched_blocks * static_cast<size_t>(route.block_size);
  tried.push_back(d.replica);
  return true;
}

void RouterServer::ProxiedRequest::count_route() {
  s_.stats_.note_routed(replica_id, reason);
  if (s_.metrics_ && tried.size() == 1 && prompt_bytes > 0) {
    s_.metrics_->router_prefix_match_ratio_all.Observe(
        std::min(1.0, static_cast<double>(matched_bytes) / static_cast<double>(prompt_bytes)));
  }
}

// Sends the request to the chosen replica.
void RouterServer::ProxiedRequest::do_try() {
  // Made before the exchange starts, so that the client leaving at any moment ends it.
  auto cancellation = std::make_shared<http::Cancellation>();
  {
    std::lock_guard lock(mu_);
    if (abandoned_) return;  // the client left between two tries
    cancellation_ = cancellation;
  }
  auto view = s_.pool_.get(replica);
  if (view) {
    // Approximate mode (a replica that publishes no KV events): remember what we sent it. Exact
    // mode: until its KV events say so (FleetIndexes::routed).
    std::lock_guard lock(s_.indexes_.mu);
    (void)(view->exact ? s_.indexes_.routed : s_.indexes_.approx).insert(replica, hashes);
  }
  count_route();
  const auto prompt_size = static_cast<int64_t>(prompt_bytes);
  pending_prefill = std::max<int64_t>(0, prompt_size - static_cast<int64_t>(matched_bytes));
  // Ended if the replica is found dead.
  s_.pool_.begin_request(replica, cancellation, prompt_size, pending_prefill);
  counted_work_id = s_.pool_.note_routed_work(replica, counted_work, route.n);
  if (!view) {
    s_.pool_.forget_routed_work(replica, counted_work_id);
    s_.pool_.end_request(replica, false, cancellation, prompt_size, pending_prefill);
    pending_prefill = 0;
    if (!do_choose()) {
      http::send_error(*responder, 503, "no healthy replica left", "server_error");
    } else {
      s_.stats_.note_retry();
      do_try();
    }
    return;
  }
  http::Headers headers;
  for (const char* name : {"content-type", "accept"}) {
    if (auto v = request.header(name)) headers.emplace_back(name, *v);
  }
  for (auto& h : replica_auth_headers(s_.config_.replica_api_key))
    headers.push_back(std::move(h));
  // A kvcascade replica announces the work with this id (KvWork::route): the send is then counted
  // as every router counts it (ReplicaView::announced_work). A proxy between them that drops the
  // header makes this router count its send twice (its own and announced) until the next report.
  if (counted_work_id != 0 && view->kind == ReplicaKind::kKvcascade) {
    headers.emplace_back("x-kvcascade-route", s_.pool_.route_of(counted_work_id));
  }
  status = 0;  // this try's (a retry must not see the last one's)
  timed_out = false;
  body.clear();
  auto self = shared_from_this();
  http::StreamOptions options;
  options.response_header_timeout =
      stream ? s_.config_.first_byte_timeout : s_.config_.upstream_timeout;
  options.body_idle_timeout = s_.config_.idle_timeout;
  options.cancellation = cancellation;
  options.on_timeout = [self] { self->timed_out = true; };  // before on_done, on its thread
  s_.client_.stream(
      view->host, view->port, request.method, request.target, upstream_body, headers,
      [self](int st, const http::Headers& upstream) { self->on_headers(st, upstream); },
      [self](std::string_view bytes) { return self->on_chunk(bytes); },
      [self, cancellation, prompt_size](Status st) {
        self->on_done(st, cancellation, prompt_size);
      },
      std::move(options));
}

void RouterServer::ProxiedRequest::prefill_started() {
  if (pending_prefill == 0) return;
  s_.pool_.prefill_started(replica, pending_prefill);
  pending_prefill = 0;
}

void RouterServer::ProxiedRequest::on_headers(int upstream_status, const http::Headers& upstream) {
  status = upstream_status;
  if (status >= 500) return;  // may be retried: nothing sent yet
  content_type = http::find_header(upstream, "content-type").value_or("application/json");
  weight_version = http::find_header(upstream, "x-kvcascade-weight-version");
  if (stream) start_client_stream();
}

bool RouterServer::ProxiedRequest::on_chunk(std::string_view bytes) {
  if (status >= 500) return true;  // drain the error body, then retry
  prefill_started();               // the answer's first bytes: its prefill is done
  if (!sent_anything) {
    if (body.size() + bytes.size() <= kMaxBufferedBody) {
      body.append(bytes);
      return !responder->client_gone();
    }
    start_client_stream();  // too large to buffer: stream it through
    responder->write(std::move(body));
    body.clear();
  }
  responder->write(std::string(bytes));
  return !responder->client_gone();
}

void RouterServer::ProxiedRequest::on_done(const Status& s,
                                           const std::shared_ptr<http::Cancellation>& cancellation,
                                           int64_t prompt_size) {
  const bool failed = !s.ok() || status >= 500;
  const bool client_gone = responder->client_gone();
  // A try that failed before its answer started never became the replica's work.
  if (failed && !sent_anything && !client_gone)
    s_.pool_.forget_routed_work(replica, counted_work_id);
  s_.pool_.end_request(replica, !failed || client_gone, cancellation, prompt_size, pending_prefill);
  pending_prefill = 0;
  if (client_gone) return;  // nobody to answer; the replica did nothing wrong
  if (!failed) {
    if (sent_anything) {
      responder->end();
    } else {
      responder->send(status, content_type, std::move(body), client_headers());
    }
    if (s_.metrics_) {
      s_.metrics_->router_request_seconds_all.Observe(
          std::chrono::duration<double>(s_.clock_.now() - begun).count());
    }
    return;
  }
  // Headers below 500 arrived (the reply may still be buffered here): mid-stream.
  s_.stats_.note_upstream_error(replica_id, sent_anything || (status > 0 && status < 500)
                                                ? "midstream"
                                            : status >= 500 ? "status"
                                            : timed_out     ? "timeout"
                                                            : "connect");
  const std::string why = s.ok() ? "status " + std::to_string(status) : s.message();
  if (!sent_anything) {
    // Retried (nothing reached the client): a replica that could not be reached, answered a
    // 5xx, was found dead or broke the connection, a reply that stalled mid-body, and a stream
    // whose first byte did not come within first_byte_timeout (queueing and prefill: another
    // replica may start it at once; README "Raise the first-byte timeout"). Not retried: a
    // non-streamed request whose reply did not come within upstream_timeout, which bounds the
    // whole generation. The replica was most likely computing it (the router's reset ends
    // that) and another would take as long again: a retry would only double the work wasted
    // before the same error.
    const bool generation_too_long = timed_out && status == 0 && !stream;
    if (!generation_too_long && static_cast<int32_t>(tried.size()) < s_.config_.max_attempts &&
        do_choose()) {
      s_.stats_.note_retry();
      do_try();
      return;
    }
    // The last try's answer was late (and no 5xx said it failed): a gateway timeout.
    if (timed_out && status < 500) {
      http::send_error(*responder, 504, "upstream replica timed out: " + why, "server_error");
    } else {
      http::send_error(*responder, 502, "upstream replica failed: " + why, "server_error");
    }
    return;
  }
  // Mid-stream: a stream ends cleanly with an error event the client can see; a plain body
  // passed through (too large to buffer) cannot say it failed, so its connection is cut without
  // the terminal chunk: a truncated body, never one that looks complete.
  if (!stream) {
    responder->abort();
    return;
  }
  responder->write(http::sse_event(http::error_body(
      "upstream replica " + replica_id + " failed mid-stream: " + why, "server_error")));
  responder->end();
}

// What the router tells the client about the route it took. The matched length only on request:
// without tenant isolation it says how much of this prompt somebody else has cached.
http::Headers RouterServer::ProxiedRequest::client_headers() const {
  http::Headers h = {{"x-kvcascade-replica", replica_id}, {"x-kvcascade-route-reason", reason}};
  if (weight_version) h.emplace_back("x-kvcascade-weight-version", *weight_version);
  if (debug_headers) h.emplace_back("x-kvcascade-matched-bytes", std::to_string(matched_bytes));
  if (debug_headers && !route_detail.empty())
    h.emplace_back("x-kvcascade-route-detail", route_detail);
  return h;
}

// Starts the client's response as a stream (a streaming request, or a body too large to buffer).
void RouterServer::ProxiedRequest::start_client_stream() {
  // An event stream with the headers a replica sends it with.
  responder->start_stream(status, content_type,
                          content_type.starts_with("text/event-stream")
                              ? http::event_stream_headers(client_headers())
                              : client_headers());
  sent_anything = true;
}

}  // namespace kvc
