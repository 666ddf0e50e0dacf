// The router's view of its replicas: address, what /v1/info says (replica id, model, block size),
// health (periodic /v1/load polls and a circuit breaker fed by proxy outcomes), load, and the KV
// events of each replica applied to the shared RadixIndex (exact mode). A replica whose
// /v1/kv_events cannot be subscribed is routed in approximate mode: the router inserts what it
// sends there and lets entries expire. A replica that leaves routing (a failed poll, an open
// breaker) leaves the index too, and a replica found dead has its proxied exchanges ended.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "http/client.h"
#include "prefix_index/chat_template.h"
#include "prefix_index/clock.h"
#include "prefix_index/radix_index.h"
#include "router/policy.h"

namespace kvc {

struct PoolConfig {
  std::chrono::milliseconds poll_interval{500};  // /v1/info and /v1/load
  std::chrono::milliseconds poll_timeout{2000};  // a poll not answered within it failed
  // A failed poll takes the replica out of routing; this many in a row make it dead: the
  // exchanges it still has in flight are ended (and retried elsewhere if nothing reached the
  // client yet), instead of waiting for a stalled process.
  int32_t failed_polls_to_dead = 2;
  int32_t failures_to_open = 3;              // consecutive proxy failures open the breaker
  std::chrono::milliseconds open_for{2000};  // then no traffic for this long
  std::chrono::milliseconds resubscribe_backoff_max{5000};
  int32_t default_block_size = 16;
  std::string replica_api_key;  // sent on polls and KV-event subscriptions (replica --api-key)
};

struct ReplicaView {  // a copy, safe to use without the pool's lock
  uint32_t index = 0;
  std::string host;
  uint16_t port = 0;
  std::string replica_id;  // from /v1/info; the address until known
  std::string hash_model;
  std::vector<std::string> models;
  // The replica's chat template from /v1/info (null: canonical rendering): chat requests are
  // hashed as the replica will tokenize them.
  std::shared_ptr<const ChatTemplate> chat_template;
  // Put around a completion prompt before hashing, as the replica's tokenizer does (BOS).
  std::string completion_prefix, completion_suffix;
  int32_t block_size = 16;
  bool healthy = false;
  bool exact = false;  // KV events subscribed
  int64_t queued_prefill_tokens = 0, running_sequences = 0, waiting_sequences = 0;
  int64_t in_flight = 0;
};

class ReplicaPool {
 public:
  // `index` is fed by the replicas' KV events; `approx` (optional) holds the entries the router
  // inserts for replicas without them. Both are guarded by index_mu; a replica that leaves
  // routing leaves both.
  ReplicaPool(http::Client& client, RadixIndex& index, std::mutex& index_mu, const Clock& clock,
              PoolConfig config = {}, RadixIndex* approx = nullptr);
  ~ReplicaPool();  // stops the poller and the subscriptions

  // "host:port" (an http:// prefix is accepted). Returns the replica's index.
  Result<uint32_t> add(const std::string& address);
  // The replica is gone (DNS, operator): its entries leave the index.
  void remove(uint32_t index);
  // Replaces the set of addresses (DNS discovery): new ones added, missing ones removed.
  void set_addresses(const std::vector<std::string>& addresses);
  void start();  // background polling and subscriptions
  // One synchronous poll of every replica (tests, start-up).
  void poll_now();

  std::vector<ReplicaView> snapshot() const;
  std::optional<ReplicaView> get(uint32_t index) const;
  // Proxy outcomes feed the circuit breaker and the in-flight counts. `cancellation`, when given,
  // is cancelled if the replica is found dead while the exchange is in flight; pass the same one
  // to end_request.
  void begin_request(uint32_t index, std::shared_ptr<http::Cancellation> cancellation = nullptr);
  void end_request(uint32_t index, bool ok,
                   const std::shared_ptr<http::Cancellation>& cancellation = nullptr);

 private:
  struct Replica;
  void poll(Replica& r);
  void subscribe(uint32_t index);
  void forget_blocks_locked(Replica& r);
  void run();

  http::Client& client_;
  RadixIndex& index_;
  std::mutex& index_mu_;
  RadixIndex* approx_;
  const Clock& clock_;
  PoolConfig config_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Replica>> replicas_;  // by index; removed ones are null
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvc
