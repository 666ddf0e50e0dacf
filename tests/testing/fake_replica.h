// A scriptable stand-in for a replica on 127.0.0.1:<port 0>, for router tests of failures that a
// real replica does not make on demand: it answers /v1/info and /v1/load like one, can publish
// a KV-event snapshot of given blocks, and does with completions what the test says — hold them
// unanswered, stream a few bytes then go silent, or answer with a status. stall() makes it stop
// answering anything (a process under `kill -STOP`). Held responders are released when it stops.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/server.h"
#include "prefix_index/block_hash.h"
#include "prefix_index/kv_event.h"

namespace kvc::testing {

class FakeReplica {
 public:
  enum class Completions {
    kHold,                  // accept and never answer
    kStreamThenStall,       // SSE headers and one event, then silence
    kPartialBodyThenStall,  // headers and half a JSON body, then silence
    kLargeBodyThenClose     // a non-streamed body over the router's 8 MiB buffer, cut part-way
  };

  struct Options {
    std::string replica_id = "fake";
    std::string model = "tiny";
    Completions completions = Completions::kHold;
    int completion_status = 0;  // > 0: answer every completion with this status instead
    // Published as a KV-event snapshot on /v1/kv_events (exact mode); empty: no KV events
    // (the router then routes this replica approximately).
    std::vector<BlockHash> blocks;
    // The first feed follows its snapshot with an event whose parent the router does not know
    // (a replica whose events the router missed); later feeds are the snapshot alone.
    bool orphan_event_once = false;
    // /v1/load reports computed_tokens_total and queued_work_tokens (set_work) as kvcascade's
    // does; false: as a replica from before they existed.
    bool report_work = false;
    // /v1/load's weight version (empty: none, as other engines) and when it was loaded (ms since
    // the epoch; 0: not reported, as a replica from before it was); set_weights changes them.
    std::string weight_version;
    int64_t weight_loaded_at_ms = 0;
    // /v1/load says the replica is paused (POST /v1/admin/pause); set_paused changes it.
    bool paused = false;
  };

  explicit FakeReplica(Options options)
      : options_(std::move(options)),
        server_(http::ServerLimits{}, [this](http::Request r, std::shared_ptr<http::Responder> w) {
          handle(std::move(r), std::move(w));
        }) {
    auto port = server_.listen("127.0.0.1", 0);
    port_ = port.ok() ? *port : 0;
  }
  ~FakeReplica() {
    server_.stop();
    std::lock_guard lock(mu_);
    held_.clear();
    feed_.reset();
  }

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // From now on nothing is answered; what arrives is held.
  void stall() { stalled_ = true; }
  int num_completions() const { return completions_.load(); }
  // What /v1/load reports next (Options::report_work).
  // Negative busy seconds or finished requests: not reported.
  void set_work(int64_t computed_tokens_total, int64_t queued_work_tokens,
                double busy_seconds_total = -1, int64_t finished_requests_total = -1) {
    computed_total_ = computed_tokens_total;
    queued_work_ = queued_work_tokens;
    busy_seconds_ = busy_seconds_total;
    finished_ = finished_requests_total;
  }
  // Also report `steps` run so far and a step model of `overhead_s` per step (the rest 0);
  // negative steps: neither.
  void set_steps(int64_t steps, double overhead_s) {
    steps_ = steps;
    step_overhead_s_ = overhead_s;
  }
  // What /v1/load reports of the weights serving next (Options::weight_version,
  // weight_loaded_at_ms).
  void set_weights(std::string version, int64_t loaded_at_ms) {
    std::lock_guard lock(mu_);
    weight_version_ = std::move(version);
    weight_loaded_at_ms_ = loaded_at_ms;
  }
  void set_paused(bool paused) { paused_ = paused; }
  // The last work announcement (KvWork::seq) /v1/load says its figures hold (negative: none).
  void set_work_seq(int64_t seq) { work_seq_ = seq; }
  // What /v1/load reports it plans per sample of a chat request without max_tokens (negative:
  // nothing, as an older replica).
  void set_planned_open_completion(int64_t tokens) { planned_open_completion_ = tokens; }
  int num_subscriptions() const { return subscriptions_.load(); }
  // Sends `events` on the latest KV-event feed as the replica's next batch (a replica that
  // stored or evicted blocks); false when no feed is open.
  bool publish(std::vector<KvEvent> events) {
    std::lock_guard lock(mu_);
    if (!feed_ || feed_->client_gone()) return false;
    KvEventBatch batch;
    batch.replica = options_.replica_id;
    batch.seq = ++feed_seq_;
    batch.events = std::move(events);
    feed_->write("data: " + encode_kv_event_batch(batch) + "\n\n");
    return true;
  }
  // Whether the latest KV-event feed is still open: subscribed, and the router has not left it.
  bool feed_open() {
    std::lock_guard lock(mu_);
    return feed_ && !feed_->client_gone();
  }
  // Completions whose router-side connection is gone (the router gave up on them).
  int num_completions_abandoned() const { return abandoned_.load(); }

  // The blocks of `prompt` as a replica of `model` holds them after serving it.
  static std::vector<BlockHash> blocks_of(const std::string& prompt,
                                          const std::string& model = "tiny") {
    return hash_blocks(chain_seed(model), prompt, 16);
  }

 private:
  void handle(http::Request r, std::shared_ptr<http::Responder> w) {
    const std::string path = r.target.substr(0, r.target.find('?'));
    if (path == "/v1/completions" || path == "/v1/chat/completions") ++completions_;
    if (stalled_) return hold(std::move(w));
    if (path == "/v1/info") {
      w->send(200, "application/json",
              nlohmann::json{{"replica_id", options_.replica_id},
                             {"model", options_.model},
                             {"hash_model", options_.model},
                             {"block_size", 16}}
                  .dump());
    } else if (path == "/v1/load") {
      nlohmann::json load = {{"running_sequences", 0}, {"waiting_sequences", 0}};
      if (options_.report_work) {
        load["computed_tokens_total"] = computed_total_.load();
        load["queued_work_tokens"] = queued_work_.load();
        if (busy_seconds_.load() >= 0) load["busy_seconds_total"] = busy_seconds_.load();
        if (finished_.load() >= 0) load["finished_requests_total"] = finished_.load();
        if (work_seq_.load() >= 0) load["work_seq"] = work_seq_.load();
        if (planned_open_completion_.load() >= 0) {
          load["planned_open_completion_tokens"] = planned_open_completion_.load();
        }
        if (steps_.load() >= 0) {
          load["steps"] = steps_.load();
          load["step_model"] = {{"overhead_s", step_overhead_s_.load()},
                                {"prefill_token_s", 0.0},
                                {"decode_seq_s", 0.0},
                                {"kv_gb_s", 0.0},
                                {"steps", steps_.load()}};
        }
      }
      {
        std::lock_guard lock(mu_);
        if (!weight_version_.empty()) load["weight_version"] = weight_version_;
        if (weight_loaded_at_ms_ > 0) load["weight_loaded_at_ms"] = weight_loaded_at_ms_;
      }
      load["paused"] = paused_.load();
      w->send(200, "application/json", load.dump());
    } else if (path == "/v1/kv_events" && !options_.blocks.empty()) {
      KvEventBatch batch;
      batch.replica = options_.replica_id;
      batch.snapshot = true;
      batch.events = {KvCleared{}, KvStored{std::nullopt, options_.blocks}};
      w->start_stream(200, "text/event-stream");
      w->write("data: " + encode_kv_event_batch(batch) + "\n\n");
      {
        std::lock_guard lock(mu_);
        feed_ = w;
        feed_seq_ = 0;
      }
      if (++subscriptions_ == 1 && options_.orphan_event_once) {
        publish({KvStored{BlockHash{0x0123456789abcdefull}, {BlockHash{0x1111ull}}}});
      }
      hold(std::move(w));  // the feed stays open
    } else if (path == "/v1/completions" || path == "/v1/chat/completions") {
      w->on_client_gone([this] { ++abandoned_; });
      if (options_.completion_status > 0) {
        w->send(options_.completion_status, "application/json",
                R"({"error":{"message":"fake failure","type":"server_error"}})");
        return;
      }
      switch (options_.completions) {
        case Completions::kHold:
          break;
        case Completions::kStreamThenStall:
          w->start_stream(200, "text/event-stream");
          w->write("data: {\"choices\":[{\"index\":0,\"text\":\"A\"}]}\n\n");
          break;
        case Completions::kPartialBodyThenStall:
          w->start_stream(200, "application/json");
          w->write(R"({"id":"cmpl-stalled","choices":[{"te)");
          break;
        case Completions::kLargeBodyThenClose:
          w->start_stream(200, "application/json");
          w->write(R"({"id":"cmpl-large","choices":[{"text":")" +
                   std::string(size_t{9} << 20, 'a'));
          w->abort();  // the connection closes mid-body
          return;
      }
      hold(std::move(w));
    } else {
      w->send(404, "application/json", "{}");
    }
  }

  void hold(std::shared_ptr<http::Responder> w) {
    std::lock_guard lock(mu_);
    held_.push_back(std::move(w));
  }

  const Options options_;
  std::atomic<bool> stalled_{false};
  std::atomic<int> completions_{0};
  std::atomic<int> subscriptions_{0};
  std::atomic<int> abandoned_{0};
  std::atomic<int64_t> computed_total_{0}, queued_work_{0};
  std::atomic<double> busy_seconds_{-1};              // < 0: not reported
  std::atomic<int64_t> finished_{-1};                 // < 0: not reported
  std::atomic<int64_t> work_seq_{-1};                 // < 0: not reported
  std::atomic<int64_t> planned_open_completion_{-1};  // < 0: not reported
  std::atomic<int64_t> steps_{-1};                    // < 0: not reported
  std::atomic<double> step_overhead_s_{0};
  std::atomic<bool> paused_{options_.paused};
  std::mutex mu_;
  std::string weight_version_ = options_.weight_version;        // guarded by mu_
  int64_t weight_loaded_at_ms_ = options_.weight_loaded_at_ms;  // guarded by mu_
  std::vector<std::shared_ptr<http::Responder>> held_;
  std::shared_ptr<http::Responder> feed_;  // the latest KV-event feed (publish)
  uint64_t feed_seq_ = 0;                  // its last batch's seq
  http::Server server_;  // last: stopped (and its handlers done) before the members above go
  uint16_t port_ = 0;
};

}  // namespace kvc::testing
