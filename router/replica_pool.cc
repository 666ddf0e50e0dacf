#include "router/replica_pool.h"

#include <cstdio>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "http/sse.h"
#include "router/replica_auth.h"

namespace kvc {

struct ReplicaPool::Replica {
  ReplicaView view;
  int32_t consecutive_failures = 0;
  int32_t failed_polls = 0;  // in a row
  Clock::TimePoint open_until{};
  // Proxied exchanges in flight that asked to be ended if the replica dies.
  std::unordered_set<std::shared_ptr<http::Cancellation>> exchanges;
  // KV-event subscription.
  bool subscribing = false;
  Clock::TimePoint next_subscribe{};
  std::chrono::milliseconds backoff{100};
  uint64_t expected_seq = 0;
  std::unique_ptr<http::SseParser> parser;
  std::shared_ptr<http::Cancellation> subscription;  // the feed in flight
  // Bumped (under mu_, before the index is cleared) whenever the replica's index entries are
  // dropped: a feed of an older generation applies nothing more.
  std::atomic<uint64_t> index_generation{0};
  std::atomic<bool> removed{false};
};

ReplicaPool::ReplicaPool(http::Client& client, RadixIndex& index, std::mutex& index_mu,
                         const Clock& clock, PoolConfig config, RadixIndex* approx)
    : client_(client),
      index_(index),
      index_mu_(index_mu),
      approx_(approx),
      clock_(clock),
      config_(config) {}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& r : replicas_)
      if (r) r->removed = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<uint32_t> ReplicaPool::add(const std::string& address) {
  auto r = std::make_shared<Replica>();
  if (!http::parse_host_port(address, r->view.host, r->view.port)) {
    return Error{"replica address '" + address + "' is not host:port"};
  }
  r->view.replica_id = r->view.host + ":" + std::to_string(r->view.port);
  r->view.block_size = config_.default_block_size;
  std::lock_guard lock(mu_);
  for (const auto& other : replicas_) {
    if (other && other->view.host == r->view.host && other->view.port == r->view.port) {
      return other->view.index;
    }
  }
  r->view.index = static_cast<uint32_t>(replicas_.size());
  replicas_.push_back(r);
  return r->view.index;
}

void ReplicaPool::remove(uint32_t index) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  replicas_[index]->removed = true;
  forget_blocks_locked(*replicas_[index]);
  replicas_[index].reset();
}

// What the indexes hold for the replica goes (it may come back restarted, its cache empty), and
// its KV-event feed is cut so that it resubscribes, with a fresh snapshot, once it is healthy
// again: a replica that was only slow would otherwise keep its feed and never send again what
// was dropped here.
void ReplicaPool::forget_blocks_locked(Replica& r) {
  ++r.index_generation;
  if (r.subscription) r.subscription->cancel("replica " + r.view.replica_id + " left routing");
  std::lock_guard index_lock(index_mu_);  // lock order: pool, then index
  index_.clear(r.view.index);
  if (approx_ != nullptr) approx_->clear(r.view.index);
}

void ReplicaPool::set_addresses(const std::vector<std::string>& addresses) {
  std::vector<uint32_t> keep;
  for (const std::string& a : addresses) {
    if (auto i = add(a); i.ok()) keep.push_back(*i);
  }
  std::vector<uint32_t> gone;
  {
    std::lock_guard lock(mu_);
    for (const auto& r : replicas_) {
      if (r && std::find(keep.begin(), keep.end(), r->view.index) == keep.end()) {
        gone.push_back(r->view.index);
      }
    }
  }
  for (uint32_t i : gone)
    remove(i);
}

std::vector<ReplicaView> ReplicaPool::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<ReplicaView> out;
  const Clock::TimePoint now = clock_.now();
  for (const auto& r : replicas_) {
    if (!r) continue;
    ReplicaView v = r->view;
    v.healthy = v.healthy && now >= r->open_until;
    out.push_back(std::move(v));
  }
  return out;
}

std::optional<ReplicaView> ReplicaPool::get(uint32_t index) const {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return std::nullopt;
  return replicas_[index]->view;
}

void ReplicaPool::begin_request(uint32_t index, std::shared_ptr<http::Cancellation> cancellation) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  Replica& r = *replicas_[index];
  ++r.view.in_flight;
  if (cancellation) r.exchanges.insert(std::move(cancellation));
}

void ReplicaPool::end_request(uint32_t index, bool ok,
                              const std::shared_ptr<http::Cancellation>& cancellation) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  Replica& r = *replicas_[index];
  --r.view.in_flight;
  if (cancellation) r.exchanges.erase(cancellation);
  if (ok) {
    r.consecutive_failures = 0;
    return;
  }
  if (++r.consecutive_failures >= config_.failures_to_open) {
    r.open_until = clock_.now() + config_.open_for;
    // The breaker opened: the replica leaves routing, and the index (else its stale entries
    // would keep drawing prefix matches to it the moment the breaker closes).
    if (r.view.healthy) forget_blocks_locked(r);
    r.view.healthy = false;  // until a poll succeeds
  }
}

void ReplicaPool::poll(Replica& r) {
  const std::string host = r.view.host;
  const uint16_t port = r.view.port;
  const bool need_info = r.view.hash_model.empty();
  std::optional<nlohmann::json> info, load;
  if (need_info) {
    auto resp =
        client_.request(host, port, "GET", "/v1/info", "",
                        replica_auth_headers(config_.replica_api_key), config_.poll_timeout);
    if (resp.ok() && resp->status == 200) {
      info = nlohmann::json::parse(resp->body, nullptr, false);
      if (info->is_discarded()) info.reset();
    }
  }
  auto resp = client_.request(host, port, "GET", "/v1/load", "",
                              replica_auth_headers(config_.replica_api_key), config_.poll_timeout);
  if (resp.ok() && resp->status == 200) {
    load = nlohmann::json::parse(resp->body, nullptr, false);
    if (load->is_discarded()) load.reset();
  }
  std::unique_lock lock(mu_);
  if (info) {
    r.view.replica_id = info->value("replica_id", r.view.replica_id);
    r.view.hash_model = info->value("hash_model", info->value("model", std::string()));
    r.view.block_size = info->value("block_size", config_.default_block_size);
    r.view.models = {info->value("model", std::string())};
    r.view.completion_prefix = info->value("completion_prefix", std::string());
    r.view.completion_suffix = info->value("completion_suffix", std::string());
    r.view.chat_template.reset();
    if (const auto t = info->find("chat_template"); t != info->end() && !t->is_null()) {
      auto compiled = ChatTemplate::from_json(*t);
      // A template this router cannot render: route by the canonical rendering (only the hit
      // estimate suffers), and say so once.
      if (compiled.ok()) {
        r.view.chat_template = std::make_shared<const ChatTemplate>(std::move(*compiled));
      } else {
        std::fprintf(stderr, "router: replica %s: %s\n", r.view.replica_id.c_str(),
                     compiled.error().message.c_str());
      }
    }
  }
  const bool ok = load.has_value() && !r.view.hash_model.empty();
  if (ok) {
    r.failed_polls = 0;
    r.view.queued_prefill_tokens = load->value("queued_prefill_tokens", int64_t{0});
    r.view.running_sequences = load->value("running_sequences", int64_t{0});
    r.view.waiting_sequences = load->value("waiting_sequences", int64_t{0});
    if (clock_.now() >= r.open_until) r.view.healthy = true;
    return;
  }
  // It went away: what it held is gone from routing until its next snapshot.
  if (r.view.healthy) forget_blocks_locked(r);
  r.view.healthy = false;
  if (++r.failed_polls < config_.failed_polls_to_dead) return;
  // Dead (stopped, or stalled like a process under SIGSTOP): its exchanges would wait for their
  // timeouts; they end now.
  const std::vector<std::shared_ptr<http::Cancellation>> dead_exchanges(r.exchanges.begin(),
                                                                        r.exchanges.end());
  const std::string why = "replica " + r.view.replica_id + " stopped answering health checks";
  lock.unlock();
  for (const auto& c : dead_exchanges)
    c->cancel(why);
}

void ReplicaPool::poll_now() {
  std::vector<std::shared_ptr<Replica>> rs;
  {
    std::lock_guard lock(mu_);
    for (auto& r : replicas_)
      if (r) rs.push_back(r);
  }
  for (auto& r : rs)
    poll(*r);
  for (auto& r : rs) {
    bool want = false;
    {
      std::lock_guard lock(mu_);
      want = r->view.healthy && !r->subscribing && clock_.now() >= r->next_subscribe && !r->removed;
      if (want) r->subscribing = true;
    }
    if (want) subscribe(r->view.index);
  }
}

// Streams /v1/kv_events into the index. The first batch is a snapshot: it replaces whatever the
// index held for the replica. A gap in sequence numbers or a broken stream resubscribes (with
// backoff), which brings a fresh snapshot.
void ReplicaPool::subscribe(uint32_t index) {
  std::shared_ptr<Replica> r;
  auto cancellation = std::make_shared<http::Cancellation>();
  uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    if (index >= replicas_.size() || !replicas_[index]) return;
    r = replicas_[index];
    r->parser = std::make_unique<http::SseParser>(8 << 20);
    r->expected_seq = 0;
    r->subscription = cancellation;
    generation = r->index_generation.load();
  }
  auto status = std::make_shared<int>(0);
  http::StreamOptions options;
  options.cancellation = cancellation;
  client_.stream(
      r->view.host, r->view.port, "GET", "/v1/kv_events", "",
      replica_auth_headers(config_.replica_api_key),
      [status](int s, const http::Headers&) { *status = s; },
      [this, r, index, status, generation](std::string_view bytes) {
        if (*status != 200 || r->removed) return false;
        auto events = r->parser->feed(bytes);
        if (!events.ok()) return false;
        for (const http::SseEvent& e : *events) {
          auto batch = decode_kv_event_batch(e.data);
          if (!batch.ok()) return false;
          {
            std::lock_guard lock(mu_);
            if (batch->seq != r->expected_seq) return false;  // missed events: resubscribe
            if (r->index_generation.load() != generation) return false;
            ++r->expected_seq;
            r->view.exact = true;
            r->backoff = std::chrono::milliseconds(100);
          }
          std::lock_guard lock(index_mu_);
          if (r->index_generation.load() != generation) return false;  // forgotten meanwhile
          if (batch->snapshot) index_.clear(index);
          for (const KvEvent& ev : batch->events)
            (void)index_.apply(index, ev);
        }
        return true;
      },
      [this, r, cancellation](Status) {
        std::lock_guard lock(mu_);
        if (r->subscription == cancellation) r->subscription.reset();
        r->subscribing = false;
        r->view.exact = false;
        r->next_subscribe = clock_.now() + r->backoff;
        r->backoff = std::min(r->backoff * 2, config_.resubscribe_backoff_max);
      },
      std::move(options));
}

void ReplicaPool::start() {
  thread_ = std::thread([this] { run(); });
}

void ReplicaPool::run() {
  while (true) {
    poll_now();
    std::unique_lock lock(mu_);
    if (wake_.wait_for(lock, config_.poll_interval, [&] { return stopping_; })) return;
  }
}

}  // namespace kvc
