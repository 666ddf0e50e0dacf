// Weight updates without a restart (POST /v1/admin/weights), pause / resume, and weight versions,
// over HTTP on 127.0.0.1: the tiny model on the CPU backend, checkpoints written here
// (write_hf_checkpoint). A response's tokens are those of a replica started on the same folder;
// the prefix cache is flushed at the swap (KV events say so); drain lets what runs finish on the
// old weights, abort ends it; bad updates change nothing.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "http/sse.h"
#include "prefix_index/kv_event.h"
#include "replica/backend/backend.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/model/weights.h"
#include "replica/server/local_replica.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

const std::string kPrompt =
    "A shared system prompt that is long enough to fill several KV blocks of sixteen tokens. ";

ModelWeights tiny(uint64_t seed) {
  return random_weights(*preset_config("tiny"), seed);
}

// A checkpoint folder of the tiny model with these weights.
std::string checkpoint(const testing::TempDir& root, const std::string& name,
                       const ModelWeights& w) {
  const std::string dir = root.file(name);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(write_hf_checkpoint(w, dir).ok());
  return dir;
}

// A CPU backend whose first weight load fails while writing (a device error, the files changed
// underneath): its weights are then incomplete, and every forward fails, until a load succeeds.
class TornLoadBackend final : public Backend {
 public:
  explicit TornLoadBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  int32_t num_blocks() const override { return inner_->num_blocks(); }
  int32_t block_size() const override { return inner_->block_size(); }
  std::string name() const override { return inner_->name(); }
  std::string quantization() const override { return inner_->quantization(); }
  std::string kv_cache_dtype() const override { return inner_->kv_cache_dtype(); }
  int32_t kv_bytes_per_element() const override { return inner_->kv_bytes_per_element(); }
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override {
    if (torn_) return Error{"the weights are incomplete"};
    return inner_->forward(batch, out);
  }
  Status check_weights(const std::string& folder) const override {
    return inner_->check_weights(folder);
  }
  // On the engine thread, as forward() and weights_intact() are.
  Status load_weights(const std::string& folder) override {
    if (!tore_) {
      tore_ = true;
      torn_ = true;
      return Error{"injected failure while writing the weights"};
    }
    Status s = inner_->load_weights(folder);
    if (s.ok()) torn_ = false;
    return s;
  }
  bool weights_intact() const override { return !torn_; }

 private:
  std::unique_ptr<Backend> inner_;
  bool tore_ = false;  // the first load failed already
  bool torn_ = false;  // the weights are incomplete
};

class WeightUpdateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = checkpoint(root_, "step-0", tiny(3));
    b_ = checkpoint(root_, "step-1", tiny(4));
    replica_ = start("r0", a_, {});
  }

  // A replica serving the folder's weights (as --model would load them).
  std::unique_ptr<LocalReplica> start(const std::string& id, const std::string& folder,
                                      std::vector<std::string> admin_keys,
                                      std::vector<std::string> api_keys = {}) {
    auto w = load_hf_weights(folder);
    EXPECT_TRUE(w.ok());
    ReplicaStackConfig c;
    c.engine.scheduler.max_model_len = 4096;
    c.server.served_model_name = "tiny";
    c.server.admin_api_keys = std::move(admin_keys);
    c.server.api_keys = std::move(api_keys);
    c.server.weight_version = "v0";
    auto backend = std::make_unique<CpuBackend>(std::move(*w), 256, 16);
    auto r = std::make_unique<LocalReplica>(id, std::move(backend), std::move(c));
    EXPECT_NE(r->port(), 0);
    return r;
  }

  http::ClientResponse call(LocalReplica& r, const std::string& method, const std::string& path,
                            const std::string& body, http::Headers headers = {}) {
    headers.emplace_back("content-type", "application/json");
    auto resp = client_.request("127.0.0.1", r.port(), method, path, body, headers, 60s);
    EXPECT_TRUE(resp.ok()) << (resp.ok() ? "" : resp.error().message);
    return resp.ok() ? *resp : http::ClientResponse{};
  }
  http::ClientResponse post(const std::string& path, const json& body, LocalReplica* r = nullptr) {
    return call(r ? *r : *replica_, "POST", path, body.dump());
  }
  json get(const std::string& path) { return json::parse(call(*replica_, "GET", path, "").body); }
  json greedy(LocalReplica* r = nullptr, int max_tokens = 12) {
    const auto resp = post("/v1/completions",
                           {{"model", "tiny"},
                            {"prompt", kPrompt},
                            {"max_tokens", max_tokens},
                            {"temperature", 0},
                            {"ignore_eos", true},
                            {"return_token_ids", true}},
                           r);
    EXPECT_EQ(resp.status, 200) << resp.body;
    json j = json::parse(resp.body);
    j["header_version"] = resp.header("x-kvcascade-weight-version").value_or("(none)");
    return j;
  }
  http::ClientResponse update(const std::string& path, const std::string& version,
                              const std::string& mode = "drain") {
    return post("/v1/admin/weights", {{"path", path}, {"version", version}, {"mode", mode}});
  }

  // A completion (or, with that path, a chat completion) sent on a thread of its own (its own
  // client): the reply when it comes.
  std::future<http::ClientResponse> completion_async(json body,
                                                     std::string path = "/v1/completions") {
    body["model"] = "tiny";
    return std::async(std::launch::async, [port = replica_->port(), body, path] {
      http::Client c;
      auto r = c.request("127.0.0.1", port, "POST", path, body.dump(),
                         {{"content-type", "application/json"}}, 60s);
      return r.ok() ? *r : http::ClientResponse{};
    });
  }
  // Waits (bounded) until /v1/load says a group runs, or that a weight update is under way.
  void wait_for_running() {
    for (int i = 0; i < 500 && get("/v1/load")["running_groups"] == 0; ++i)
      std::this_thread::sleep_for(2ms);
  }
  void wait_for_updating() {
    for (int i = 0; i < 500 && !get("/v1/load")["updating_weights"].get<bool>(); ++i)
      std::this_thread::sleep_for(2ms);
  }

  testing::TempDir root_;
  std::string a_, b_;
  std::unique_ptr<LocalReplica> replica_;
  http::Client client_;
};

TEST_F(WeightUpdateTest, TheNewWeightsServeWithTheirVersionAndTheOldKvIsGone) {
  const json before = greedy();
  EXPECT_EQ(before["weight_version"], "v0");
  EXPECT_EQ(before["header_version"], "v0");
  // (/v1/load is refreshed after the step that answered: a moment after the answer.)
  int cached = 0;
  for (int i = 0; i < 200 && cached == 0; ++i, std::this_thread::sleep_for(5ms))
    cached = get("/v1/load")["kv_blocks"]["cached"].get<int>();
  EXPECT_GT(cached, 0);
  EXPECT_GT(greedy()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  // When an update's weights began to serve (ms since the epoch): routers rank versions by it.
  // The start-up weights have no such time: a replica restarted on them is not the newest.
  EXPECT_TRUE(get("/v1/load")["weight_loaded_at_ms"].is_null());
  EXPECT_TRUE(get("/v1/info")["weight_loaded_at_ms"].is_null());
  const auto before_update = std::chrono::system_clock::now();
  const int64_t started_at =
      std::chrono::duration_cast<std::chrono::milliseconds>(before_update.time_since_epoch())
          .count() -
      1;

  const auto r = update(b_, "step-1");
  ASSERT_EQ(r.status, 200) << r.body;
  const json report = json::parse(r.body);
  EXPECT_EQ(report["weight_version"], "step-1");
  EXPECT_EQ(report["previous_weight_version"], "v0");
  EXPECT_GT(report["flushed_blocks"].get<int>(), 0);
  EXPECT_EQ(r.header("x-kvcascade-weight-version"), "step-1");
  EXPECT_EQ(get("/v1/load")["kv_blocks"]["cached"], 0);
  EXPECT_EQ(get("/v1/info")["weight_version"], "step-1");
  EXPECT_EQ(get("/v1/load")["weight_version"], "step-1");
  // Loaded later than the weights it replaced (each update, even within one millisecond).
  const int64_t updated_at = get("/v1/load")["weight_loaded_at_ms"].get<int64_t>();
  EXPECT_GT(updated_at, started_at);
  EXPECT_EQ(get("/v1/info")["weight_loaded_at_ms"].get<int64_t>(), updated_at);

  const json after = greedy();
  EXPECT_EQ(after["weight_version"], "step-1");
  EXPECT_EQ(after["header_version"], "step-1");
  // Nothing computed with the old weights was reused.
  EXPECT_EQ(after["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The tokens are those of a replica started on the new folder, and not the old ones.
  auto fresh = start("fresh", b_, {});
  const json want = greedy(fresh.get());
  EXPECT_EQ(after["choices"][0]["token_ids"], want["choices"][0]["token_ids"]);
  EXPECT_NE(after["choices"][0]["token_ids"], before["choices"][0]["token_ids"]);
  // And back: the first checkpoint's tokens again.
  ASSERT_EQ(update(a_, "step-2", "abort").status, 200);
  EXPECT_EQ(greedy()["choices"][0]["token_ids"], before["choices"][0]["token_ids"]);
  // The version is a metric label, of the one series the metric keeps (the replaced versions'
  // series are removed: one per version would grow without bound in an RL run).
  const std::string metrics = call(*replica_, "GET", "/metrics", "").body;
  EXPECT_NE(metrics.find("kvcascade_weight_version_info{version=\"step-2\"} 1"), std::string::npos)
      << metrics.substr(0, 400);
  EXPECT_EQ(metrics.find("kvcascade_weight_version_info{version=\"step-1\"}"), std::string::npos);
  EXPECT_EQ(metrics.find("kvcascade_weight_version_info{version=\"v0\"}"), std::string::npos);
  EXPECT_NE(metrics.find("kvcascade_weight_updates_total{result=\"ok\"} 2"), std::string::npos);
}

TEST_F(WeightUpdateTest, TheKvEventStreamSaysTheCacheWasCleared) {
  greedy();
  std::promise<void> got_snapshot, got_clear;
  std::atomic<bool> snapshot_seen{false}, clear_seen{false};
  std::promise<Status> finished;
  http::SseParser parser;
  client_.stream(
      "127.0.0.1", replica_->port(), "GET", "/v1/kv_events", "", {},
      [](int, const http::Headers&) {},
      [&](std::string_view bytes) {
        auto events = parser.feed(bytes);
        if (!events.ok()) return false;
        for (const auto& e : *events) {
          auto batch = decode_kv_event_batch(e.data);
          if (!batch.ok()) continue;
          if (batch->snapshot) {
            if (!snapshot_seen.exchange(true)) got_snapshot.set_value();
            continue;
          }
          for (const KvEvent& ev : batch->events) {
            if (std::holds_alternative<KvCleared>(ev) && !clear_seen.exchange(true)) {
              got_clear.set_value();
            }
          }
        }
        return !clear_seen.load();
      },
      [&](Status s) { finished.set_value(s); });
  ASSERT_EQ(got_snapshot.get_future().wait_for(10s), std::future_status::ready);
  ASSERT_EQ(update(b_, "step-1").status, 200);
  EXPECT_EQ(got_clear.get_future().wait_for(10s), std::future_status::ready);
  finished.get_future().wait_for(10s);
}

TEST_F(WeightUpdateTest, DrainFinishesWhatRunsOnTheOldWeightsAndQueuesTheRest) {
  // A long stream runs; the update drains it; a request sent meanwhile waits for the new weights.
  auto running = completion_async(
      {{"prompt", kPrompt}, {"max_tokens", 1000}, {"ignore_eos", true}, {"stream", true}});
  wait_for_running();
  auto updating = std::async(std::launch::async, [&] { return update(b_, "step-1"); });
  wait_for_updating();
  // A second update while one runs: 409, and nothing changes.
  const auto second = update(a_, "step-x");
  EXPECT_EQ(second.status, 409) << second.body;
  auto queued = completion_async({{"prompt", "queued"}, {"max_tokens", 3}});
  const auto old = running.get();
  ASSERT_EQ(old.status, 200);
  EXPECT_EQ(old.header("x-kvcascade-weight-version"), "v0");
  EXPECT_NE(old.body.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_EQ(old.body.find("\"weight_version\":\"step-1\""), std::string::npos);
  ASSERT_EQ(updating.get().status, 200);
  const auto late = queued.get();
  ASSERT_EQ(late.status, 200) << late.body;
  EXPECT_EQ(json::parse(late.body)["weight_version"], "step-1");
}

// Cancellation holds through a drain: a client that leaves ends its group, and the update
// waiting for it goes ahead at once instead of after the group's 1500 tokens.
TEST_F(WeightUpdateTest, AClientLeavingDuringADrainLetsTheSwapGoAhead) {
  std::promise<void> first_chunk;
  std::atomic<bool> got{false};
  std::promise<Status> ended;
  std::atomic<bool> leave{false};
  client_.stream(
      "127.0.0.1", replica_->port(), "POST", "/v1/completions",
      json{{"model", "tiny"},
           {"prompt", kPrompt},
           {"max_tokens", 1500},
           {"ignore_eos", true},
           {"stream", true}}
          .dump(),
      {{"content-type", "application/json"}}, [](int, const http::Headers&) {},
      [&](std::string_view) {
        if (!got.exchange(true)) first_chunk.set_value();
        return !leave.load();
      },
      [&](Status s) { ended.set_value(s); });
  ASSERT_EQ(first_chunk.get_future().wait_for(10s), std::future_status::ready);
  auto updating = std::async(std::launch::async, [&] { return update(b_, "step-1"); });
  wait_for_updating();
  leave = true;  // the client goes away mid-stream
  ASSERT_EQ(updating.wait_for(10s), std::future_status::ready);
  const auto r = updating.get();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(greedy()["weight_version"], "step-1");
  ended.get_future().wait_for(10s);
}

TEST_F(WeightUpdateTest, AbortEndsWhatRunsAndSwapsAtOnce) {
  auto running =
      completion_async({{"prompt", kPrompt}, {"max_tokens", 1500}, {"ignore_eos", true}, {"n", 2}});
  wait_for_running();
  const auto r = update(b_, "step-1", "abort");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["aborted_groups"], 1);
  const json old = json::parse(running.get().body);
  EXPECT_EQ(old["weight_version"], "v0");
  EXPECT_EQ(old["choices"][0]["finish_reason"], "abort");
  EXPECT_EQ(old["choices"][1]["finish_reason"], "abort");
  EXPECT_LT(old["usage"]["completion_tokens"].get<int>(), 2 * 1500);
  EXPECT_EQ(greedy()["weight_version"], "step-1");
}

// The same for streams, completions and chat: every choice's last chunk has finish_reason
// "abort" (a streaming RL client tells a cut rollout from a finished one), then the usage asked
// for, then [DONE]. Streams used to end with no finish reason at all.
TEST_F(WeightUpdateTest, AbortEndsEveryChoiceOfAStreamWithFinishReasonAbort) {
  struct Case {
    std::string path, folder, version, old_version;
  };
  for (const Case& t : {Case{"/v1/completions", b_, "step-1", "v0"},
                        Case{"/v1/chat/completions", a_, "step-2", "step-1"}}) {
    SCOPED_TRACE(t.path);
    const bool chat = t.path == "/v1/chat/completions";
    json body = {{"max_tokens", 1500},
                 {"ignore_eos", true},
                 {"n", 2},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (chat) {
      body["messages"] = {{{"role", "user"}, {"content", kPrompt}}};
    } else {
      body["prompt"] = kPrompt;
    }
    auto running = completion_async(body, t.path);
    wait_for_running();
    const auto r = update(t.folder, t.version, "abort");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(json::parse(r.body)["aborted_groups"], 1);
    const auto old = running.get();
    ASSERT_EQ(old.status, 200) << old.body;
    EXPECT_EQ(old.header("x-kvcascade-weight-version"), t.old_version);
    http::SseParser parser;
    auto events = parser.feed(old.body);
    ASSERT_TRUE(events.ok());
    ASSERT_FALSE(events->empty());
    EXPECT_EQ(events->back().data, "[DONE]");
    std::map<int, std::vector<json>> finish;  // per choice, its non-null finish reasons
    bool usage = false;
    for (size_t e = 0; e + 1 < events->size(); ++e) {
      const json chunk = json::parse((*events)[e].data);
      ASSERT_FALSE(chunk.contains("error")) << chunk.dump();
      EXPECT_EQ(chunk["object"], chat ? "chat.completion.chunk" : "text_completion");
      EXPECT_EQ(chunk["weight_version"].get<std::string>(), t.old_version);
      if (chunk.contains("usage") && !chunk["usage"].is_null()) {
        EXPECT_FALSE(usage) << "a second usage chunk";
        usage = true;
        EXPECT_TRUE(chunk["choices"].empty());
        EXPECT_LT(chunk["usage"]["completion_tokens"].get<int>(), 2 * 1500);
        continue;
      }
      EXPECT_FALSE(usage) << "a choice's chunk after the usage: " << chunk.dump();
      for (const json& c : chunk["choices"]) {
        const int i = c["index"].get<int>();
        // Nothing follows a choice's last chunk.
        EXPECT_TRUE(finish[i].empty()) << "choice " << i << " after its end: " << chunk.dump();
        if (!c["finish_reason"].is_null()) finish[i].push_back(c["finish_reason"]);
      }
    }
    EXPECT_TRUE(usage);
    ASSERT_EQ(finish.size(), 2u) << old.body.substr(0, 2000);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(finish[i].size(), 1u) << i;
      EXPECT_EQ(finish[i][0], "abort") << i;
    }
  }
  EXPECT_EQ(greedy()["weight_version"], "step-2");
}

TEST_F(WeightUpdateTest, BadUpdatesGetJsonErrorsAndChangeNothing) {
  const json before = greedy();
  auto expect = [&](const http::ClientResponse& r, int status, const char* param) {
    EXPECT_EQ(r.status, status) << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    if (param) {
      EXPECT_EQ(j["error"]["param"], param) << r.body;
    }
  };
  expect(update(b_, "step-1", "sideways"), 400, "mode");
  expect(update(root_.file("no-such-folder"), "step-1"), 400, "path");
  expect(update(b_, "has space"), 400, "version");
  expect(update(b_, "tab\there"), 400, "version");
  expect(update(b_, ""), 400, "version");
  expect(post("/v1/admin/weights", {{"version", "x"}}), 400, "path");
  // A misspelt field would mean its default; a relative path the replica's working directory.
  expect(post("/v1/admin/weights", {{"path", b_}, {"version", "x"}, {"Mode", "abort"}}), 400,
         nullptr);
  expect(post("/v1/admin/weights", {{"path", "ckpt/step-1"}, {"version", "x"}}), 400, "path");
  expect(call(*replica_, "POST", "/v1/admin/weights", "{not json"), 400, nullptr);
  expect(call(*replica_, "GET", "/v1/admin/weights", ""), 405, nullptr);
  // Another model's shape: refused with the field named.
  ModelConfig wide = *preset_config("tiny");
  wide.hidden_size *= 2;
  const std::string other = checkpoint(root_, "wide", random_weights(wide, 1));
  const auto shape = update(other, "step-1");
  expect(shape, 400, "path");
  EXPECT_NE(shape.body.find("hidden_size"), std::string::npos) << shape.body;
  // A tensor missing, and a truncated file: refused before anything is written.
  const std::string broken = checkpoint(root_, "broken", tiny(5));
  std::filesystem::resize_file(broken + "/model.safetensors",
                               std::filesystem::file_size(broken + "/model.safetensors") / 2);
  expect(update(broken, "step-1"), 400, "path");
  const std::string empty = root_.file("empty");
  std::filesystem::create_directories(empty);
  std::filesystem::copy_file(b_ + "/config.json", empty + "/config.json");
  expect(update(empty, "step-1"), 400, "path");
  // A checkpoint of the right shapes holding NaN (the final norm, as bf16 0x7fc0): it would
  // serve token 0 forever with /health at 200. Refused, the tensor named.
  ModelWeights nan_weights = tiny(6);
  std::fill(nan_weights.final_norm.begin(), nan_weights.final_norm.end(),
            std::numeric_limits<float>::quiet_NaN());
  const std::string nan_dir = checkpoint(root_, "nan", nan_weights);
  const auto refused = update(nan_dir, "step-1");
  expect(refused, 400, "path");
  EXPECT_NE(refused.body.find("model.norm.weight"), std::string::npos) << refused.body;
  EXPECT_NE(refused.body.find("NaN"), std::string::npos) << refused.body;
  // The old weights serve on, whole.
  const json after = greedy();
  EXPECT_EQ(after["weight_version"], "v0");
  EXPECT_EQ(after["choices"][0]["token_ids"], before["choices"][0]["token_ids"]);
  EXPECT_EQ(call(*replica_, "GET", "/health", "").status, 200);
  // In abort mode it is refused before the running requests are cut for it.
  auto running =
      completion_async({{"prompt", kPrompt}, {"max_tokens", 300}, {"ignore_eos", true}, {"n", 2}});
  wait_for_running();
  expect(update(nan_dir, "step-1", "abort"), 400, "path");
  const json ran = json::parse(running.get().body);
  EXPECT_EQ(ran["choices"][0]["finish_reason"], "length") << ran.dump();
  EXPECT_EQ(ran["weight_version"], "v0");
}

TEST_F(WeightUpdateTest, PauseQueuesRequestsUntilResume) {
  ASSERT_EQ(post("/v1/admin/pause", json::object()).status, 200);
  auto queued = std::async(std::launch::async, [&] { return greedy(); });
  EXPECT_EQ(queued.wait_for(300ms), std::future_status::timeout);
  EXPECT_TRUE(get("/v1/load")["paused"].get<bool>());
  // The request reached the replica and waits there (on a loaded machine it may take longer
  // than the 300 ms above to arrive: poll, bounded).
  json waiting;
  for (int i = 0; i < 500; ++i) {
    waiting = get("/v1/load")["waiting_groups"];
    if (waiting == 1) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(waiting, 1);
  EXPECT_EQ(queued.wait_for(0ms), std::future_status::timeout) << "answered while paused";
  ASSERT_EQ(post("/v1/admin/resume", json::object()).status, 200);
  EXPECT_EQ(queued.get()["weight_version"], "v0");
  EXPECT_FALSE(get("/v1/load")["paused"].get<bool>());
}

TEST_F(WeightUpdateTest, AdminEndpointsNeedTheAdminKey) {
  auto guarded = start("guarded", a_, {"admin-secret"}, {"user-secret"});
  auto with = [&](const std::string& key, const std::string& path, const json& body) {
    return call(*guarded, "POST", path, body.dump(), {{"authorization", "Bearer " + key}});
  };
  const json upd = {{"path", b_}, {"version", "step-1"}};
  EXPECT_EQ(call(*guarded, "POST", "/v1/admin/weights", upd.dump()).status, 401);
  EXPECT_EQ(with("user-secret", "/v1/admin/weights", upd).status, 401);
  EXPECT_EQ(with("user-secret", "/v1/admin/pause", json::object()).status, 401);
  EXPECT_EQ(with("admin-secret", "/v1/admin/weights", upd).status, 200);
  // Completions still take the API key, not the admin key.
  const json req = {{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 1}};
  EXPECT_EQ(with("admin-secret", "/v1/completions", req).status, 401);
  EXPECT_EQ(with("user-secret", "/v1/completions", req).status, 200);
}

// The probes need no key, like /health: /livez says the process serves; /readyz (and /health)
// whether it can serve, 503 while its weights are incomplete after an update failed while
// writing (a liveness probe must not restart it for that), 200 again once an update succeeds.
// /livez and /readyz, which the replica's --help names as probe paths, used to be 404.
TEST_F(WeightUpdateTest, ProbesSayLiveAndWhetherReady) {
  auto w = load_hf_weights(a_);
  ASSERT_TRUE(w.ok());
  ReplicaStackConfig c;
  c.engine.scheduler.max_model_len = 4096;
  c.server.served_model_name = "tiny";
  c.server.api_keys = {"client-key"};
  c.server.weight_version = "v0";
  LocalReplica r(
      "torn",
      std::make_unique<TornLoadBackend>(std::make_unique<CpuBackend>(std::move(*w), 256, 16)),
      std::move(c));
  ASSERT_NE(r.port(), 0);
  auto status = [&](const char* path) { return call(r, "GET", path, "").status; };
  for (const char* path : {"/livez", "/readyz", "/health"})
    EXPECT_EQ(status(path), 200) << path;
  EXPECT_EQ(json::parse(call(r, "GET", "/livez", "").body)["status"], "ok");
  EXPECT_EQ(status("/v1/load"), 401);  // every other path needs the key
  EXPECT_EQ(call(r, "POST", "/readyz", "{}").status, 405);
  const http::Headers key = {{"authorization", "Bearer client-key"}};
  const auto failed =
      call(r, "POST", "/v1/admin/weights", json{{"path", b_}, {"version", "v1"}}.dump(), key);
  EXPECT_EQ(failed.status, 500) << failed.body;
  EXPECT_EQ(status("/livez"), 200);
  EXPECT_EQ(status("/readyz"), 503);
  EXPECT_EQ(status("/health"), 503);
  const auto mended =
      call(r, "POST", "/v1/admin/weights", json{{"path", b_}, {"version", "v2"}}.dump(), key);
  EXPECT_EQ(mended.status, 200) << mended.body;
  for (const char* path : {"/livez", "/readyz", "/health"})
    EXPECT_EQ(status(path), 200) << path;
}

}  // namespace
}  // namespace kvc
