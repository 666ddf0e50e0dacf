#include "router/fleet/dns_discovery.h"

#include <algorithm>
#include <thread>

#include <gtest/gtest.h>

#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using namespace std::chrono_literals;

TEST(DnsDiscovery, ResolvesLocalhostAndFeedsThePool) {
  auto addrs = resolve_all("localhost", 8123);
  ASSERT_TRUE(addrs.ok()) << addrs.error().message;
  ASSERT_FALSE(addrs->empty());
  EXPECT_TRUE(std::find(addrs->begin(), addrs->end(), "127.0.0.1:8123") != addrs->end() ||
              std::find(addrs->begin(), addrs->end(), "[::1]:8123") != addrs->end());
  EXPECT_FALSE(resolve_all("no-such-host.invalid", 1).ok());

  testing::FakeClock clock;
  FleetIndexes indexes(clock);
  http::Client client;
  ReplicaPool pool(client, indexes, clock);
  {
    DnsDiscovery dns(pool, "localhost:8123", 50ms);
    ASSERT_TRUE(dns.start().ok());
    for (int i = 0; i < 500 && pool.snapshot().empty(); ++i)
      std::this_thread::sleep_for(10ms);
    ASSERT_FALSE(pool.snapshot().empty());
    EXPECT_EQ(pool.snapshot().front().port, 8123);
  }  // the discovery thread ends here: its next answer cannot race the one below
  // A new answer adds what appeared.
  pool.set_addresses({"127.0.0.2:9"});
  const auto s = pool.snapshot();
  EXPECT_TRUE(
      std::any_of(s.begin(), s.end(), [](const ReplicaView& r) { return r.host == "127.0.0.2"; }));

  for (const char* target : {"missing-port", "host:80abc", "host:0", "host:65536", ":80",
                             "http://host:80", "host:+80"}) {
    DnsDiscovery bad(pool, target, 50ms);
    EXPECT_FALSE(bad.start().ok()) << target;
  }
}

TEST(ReplicaPool, RejectsMalformedAddresses) {
  testing::FakeClock clock;
  FleetIndexes indexes(clock);
  http::Client client;
  ReplicaPool pool(client, indexes, clock);
  EXPECT_FALSE(pool.add("no-port").ok());
  EXPECT_FALSE(pool.add("host:99999").ok());
  EXPECT_FALSE(pool.add("host:abc").ok());
  ASSERT_TRUE(pool.add("http://127.0.0.1:8000/").ok());
  EXPECT_EQ(*pool.add("127.0.0.1:8000"), 0u);  // same address, same replica
}

// What `kvcascade router --check-config` and RouterStack::start check: the addresses the pool and
// the DNS discovery take, no other (--check-config used to pass every address).
TEST(CheckReplicaAddresses, PassesWhatThePoolTakesAndNamesWhatItRefuses) {
  EXPECT_TRUE(check_replica_addresses({}, "").ok());
  EXPECT_TRUE(
      check_replica_addresses({"127.0.0.1:8000", "http://replica-0.svc:80/", "[::1]:65535"}, "")
          .ok());
  EXPECT_TRUE(check_replica_addresses({}, "kvcascade-replica.default.svc:8000").ok());
  for (const char* bad : {"notanaddress", "127.0.0.1:0", "127.0.0.1:99999",
                          "http://127.0.0.1:18101/v1", "ftp://127.0.0.1:18101", ":8000"}) {
    const Status s = check_replica_addresses({"127.0.0.1:8000", bad}, "");
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find(std::string("'") + bad + "' is not host:port"), std::string::npos)
        << s.message();
    testing::FakeClock clock;
    FleetIndexes indexes(clock);
    http::Client client;
    ReplicaPool pool(client, indexes, clock);
    EXPECT_FALSE(pool.add(bad).ok()) << bad;  // the pool refuses the same
  }
  for (const char* bad : {"missing-port", "host:0", "http://host:80"}) {
    const Status s = check_replica_addresses({}, bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--replica-dns"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace kvc
