// Every metric the Grafana dashboard and the Prometheus config use exists in the live /metrics
// output of a replica and a router after a short workload (including a failed upstream, so the
// error and retry series exist too).
#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "replica/server/local_replica.h"
#include "router/router_stack.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// kvcascade_* names in a text, histogram suffixes stripped.
std::set<std::string> metric_names(const std::string& text) {
  std::set<std::string> out;
  const std::regex name("kvcascade_[a-z0-9_]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator();
       ++it) {
    std::string n = it->str();
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (n.size() > s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0) {
        n.resize(n.size() - s.size());
      }
    }
    out.insert(n);
  }
  return out;
}

// Two tiny replicas "a" and "b" behind a router of their own, waited for (bounded) until the
// router sees both healthy (and, with `subscribed`, taking their KV events).
struct TwoReplicaFleet {
  LocalReplica a{"a", 512}, b{"b", 512};
  RouterStack router{config(a, b)};
  uint16_t port = 0;
  explicit TwoReplicaFleet(bool subscribed) {
    auto p = router.start("127.0.0.1", 0);
    EXPECT_TRUE(p.ok());
    port = p.ok() ? *p : 0;
    for (int i = 0; i < 100; ++i) {
      auto s = router.pool().snapshot();
      if (std::all_of(s.begin(), s.end(),
                      [&](auto& r) { return r.healthy && (!subscribed || r.exact); })) {
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  static RouterStackConfig config(const LocalReplica& a, const LocalReplica& b) {
    RouterStackConfig rc;
    rc.replicas = {a.address(), b.address()};
    rc.pool.poll_interval = 100ms;
    return rc;
  }
};

TEST(LiveMetricNames, DashboardAndPrometheusConfigNamesAreExposed) {
  const std::string dashboard = read_file(KVC_SOURCE_DIR "/deploy/grafana/kvcascade.json");
  ASSERT_FALSE(dashboard.empty());
  ASSERT_FALSE(json::parse(dashboard, nullptr, false).is_discarded());
  std::set<std::string> wanted = metric_names(dashboard);
  const std::set<std::string> from_config =
      metric_names(read_file(KVC_SOURCE_DIR "/deploy/prometheus/prometheus.yml"));
  wanted.insert(from_config.begin(), from_config.end());
  wanted.erase("kvcascade_");  // the keep-regex prefix in prometheus.yml
  ASSERT_GT(wanted.size(), 15u);

  TwoReplicaFleet fleet(/*subscribed=*/true);
  ASSERT_NE(fleet.port, 0);
  LocalReplica &a = fleet.a, &b = fleet.b;
  const uint16_t port = fleet.port;
  http::Client client;
  auto post = [&](const std::string& prompt, int n) {
    return client.request("127.0.0.1", port, "POST", "/v1/completions",
                          json{{"model", "tiny"},
                               {"prompt", prompt},
                               {"n", n},
                               {"max_tokens", 4},
                               {"ignore_eos", true}}
                              .dump(),
                          {{"content-type", "application/json"}}, 60s);
  };
  const std::string shared(400, 's');
  ASSERT_EQ(post(shared + "one", 4)->status, 200);
  ASSERT_EQ(post(shared + "two", 4)->status, 200);
  // A replica that dies under the router: its next request fails over (error + retry series).
  const std::string target = post(shared + "three", 1)->header("x-kvcascade-replica").value_or("");
  (target == "a" ? a : b).stop();
  ASSERT_EQ(post(shared + "four", 1)->status, 200);

  std::string live = client.request("127.0.0.1", port, "GET", "/metrics")->body;
  for (LocalReplica* r : {&a, &b}) {
    if (r->port() == 0) continue;
    if (auto m = client.request("127.0.0.1", r->port(), "GET", "/metrics"); m.ok()) live += m->body;
  }
  const std::set<std::string> exposed = metric_names(live);
  for (const std::string& name : wanted) {
    EXPECT_TRUE(exposed.contains(name)) << name << " is used by deploy/ but not exposed";
  }
}

// A fleet that has had no error shows router_upstream_errors_total at 0 for every replica and
// kind (the dashboard's "Upstream errors and retries" panel): the series used to appear only
// with the first error, so the panel said "No data".
TEST(LiveMetricNames, UpstreamErrorSeriesExistAtZeroBeforeAnyError) {
  TwoReplicaFleet fleet(/*subscribed=*/false);
  ASSERT_NE(fleet.port, 0);
  const uint16_t port = fleet.port;
  auto m = http::Client().request("127.0.0.1", port, "GET", "/metrics");
  ASSERT_TRUE(m.ok());
  const std::string& live = m->body;
  EXPECT_NE(live.find("# TYPE kvcascade_router_upstream_errors_total counter"), std::string::npos);
  for (const char* replica : {"a", "b"}) {
    for (const char* kind : {"connect", "midstream", "status", "timeout"}) {
      const std::string series = std::string("kvcascade_router_upstream_errors_total{kind=\"") +
                                 kind + "\",replica=\"" + replica + "\"} 0\n";
      EXPECT_NE(live.find(series), std::string::npos) << series << live.substr(0, 4000);
    }
  }
}

}  // namespace
}  // namespace kvc
