// ReplicaPool's per-replica counts of what this router sent: requests and prompt tokens in flight
// until they end, and the uncached prefill pending until the answer starts (or the try ends);
// the routed-work and busy signals from the replicas' reports; the rank of their weight
// versions, alike for every router; and its KV-event feeds when the pool goes before the client.
#include "router/fleet/replica_pool.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "api/openai_request.h"
#include "base/clock.h"
#include "http/client.h"
#include "prefix_index/radix_index.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_replica.h"

namespace kvc {
namespace {

TEST(ReplicaPoolCounts, PendingPrefillLastsUntilTheAnswerStartsOrTheTryEnds) {
  http::Client client;
  SteadyClock clock;
  FleetIndexes indexes(clock);
  ReplicaPool pool(client, indexes, clock);
  auto a = pool.add("127.0.0.1:1");
  ASSERT_TRUE(a.ok());
  const uint32_t r = *a;
  auto view = [&] { return *pool.get(r); };

  pool.begin_request(r, nullptr, 1000, 600);  // 400 of 1,000 prompt tokens were cached there
  pool.begin_request(r, nullptr, 500, 500);
  EXPECT_EQ(view().in_flight, 2);
  EXPECT_EQ(view().in_flight_prompt_bytes, 1500);
  EXPECT_EQ(view().pending_prefill_tokens, 1100);

  pool.prefill_started(r, 600);  // the first answer's first bytes
  EXPECT_EQ(view().pending_prefill_tokens, 500);
  EXPECT_EQ(view().in_flight, 2);  // still generating

  pool.end_request(r, true, nullptr, 1000, 0);    // handed back already
  pool.end_request(r, false, nullptr, 500, 500);  // failed before its answer started
  EXPECT_EQ(view().in_flight, 0);
  EXPECT_EQ(view().in_flight_prompt_bytes, 0);
  EXPECT_EQ(view().pending_prefill_tokens, 0);

  // Unknown indexes are ignored.
  pool.begin_request(r + 7, nullptr, 10, 10);
  pool.prefill_started(r + 7, 10);
}

// Replicas "a" and "b" reporting their work figures and "old" reporting none (a replica from
// before them), in a pool on the steady clock.
struct TwoReportersAndAnOldOne {
  static testing::FakeReplica::Options options(std::string id, bool report_work) {
    testing::FakeReplica::Options o;
    o.replica_id = std::move(id);
    o.report_work = report_work;
    return o;
  }
  explicit TwoReportersAndAnOldOne(const PoolConfig& config)
      : pool(client, indexes, clock, config),
        ra(*pool.add(a.address())),
        rb(*pool.add(b.address())),
        rold(*pool.add(old.address())) {}
  testing::FakeReplica a{options("a", true)}, b{options("b", true)}, old{options("old", false)};
  http::Client client;
  SteadyClock clock;
  FleetIndexes indexes{clock};
  ReplicaPool pool;
  const uint32_t ra, rb, rold;
};

// The routed-work signal: what a replica reports (its computed tokens, decayed, plus the work
// queued there), which every router reads alike, plus this router's sends since that report. A
// send counts until a report asked for after it; a failed send counts no more; a replica that
// restarts (its counter goes back) starts at the others' mean; one that reports nothing has none.
TEST(ReplicaPoolCounts, RoutedWorkIsTheReportPlusThisRoutersSendsSinceIt) {
  PoolConfig config;
  config.routed_work_horizon = std::chrono::hours(1000);  // no decay to speak of in a test
  TwoReportersAndAnOldOne f(config);
  auto [a, b, pool, ra, rb, rold] = std::tie(f.a, f.b, f.pool, f.ra, f.rb, f.rold);
  // f.pool, not the binding: clang before 16 does not capture structured bindings.
  auto work = [&](uint32_t r) { return f.pool.get(r)->routed_work; };

  a.set_work(5000, 300);
  b.set_work(100, 0);
  pool.poll_now();  // the first report: both join at the others' mean (nothing yet)
  ASSERT_TRUE(pool.get(ra)->healthy);
  EXPECT_NEAR(*work(ra), 300, 1e-6);
  EXPECT_NEAR(*work(rb), 0, 1e-6);
  EXPECT_FALSE(work(rold).has_value());

  a.set_work(6000, 500);  // 1,000 tokens computed since, 500 queued
  pool.poll_now();
  EXPECT_NEAR(*work(ra), 1500, 1e-3);

  const uint64_t sent = pool.note_routed_work(ra, 700, 8);
  const uint64_t failed = pool.note_routed_work(ra, 40, 1);
  EXPECT_NEAR(*work(ra), 2240, 1e-3);
  EXPECT_EQ(pool.get(ra)->unacked_sequences, 9);
  pool.forget_routed_work(ra, failed);
  EXPECT_NEAR(*work(ra), 2200, 1e-3);
  EXPECT_EQ(pool.get(ra)->unacked_sequences, 8);
  (void)sent;
  a.set_work(6000, 1200);  // the next report has the send in its queue
  pool.poll_now();
  EXPECT_NEAR(*work(ra), 2200, 1e-3);
  EXPECT_EQ(pool.get(ra)->unacked_sequences, 0);

  b.set_work(2100, 0);
  pool.poll_now();
  EXPECT_NEAR(*work(rb), 2000, 1e-3);
  a.set_work(10, 0);  // a restarted: its count starts at the others' mean
  pool.poll_now();
  EXPECT_NEAR(*work(ra), 2000, 1e-3);
}

// The work a replica announces queuing (KvWork, from its KV events) counts for every router from
// the announcement until a report whose work_seq holds it, alike whichever router sent it; this
// router's own send counts until its announcement (its route id) comes, then as announced, never
// twice; repeats count once; a report whose seq went back (a restart) drops the rest; a replica
// whose reports give no work_seq has its announcements ignored.
TEST(ReplicaPoolCounts, AnnouncedWorkCountsForEveryRouterUntilAReportHoldsIt) {
  PoolConfig config;
  config.routed_work_horizon = std::chrono::hours(1000);  // no decay to speak of in a test
  TwoReportersAndAnOldOne f(config);
  auto [a, b, pool, ra, rb, rold] = std::tie(f.a, f.b, f.pool, f.ra, f.rb, f.rold);
  auto work = [&](uint32_t r) { return *f.pool.get(r)->routed_work; };  // f.pool: as above
  a.set_work(1000, 0);
  a.set_work_seq(4);
  b.set_work(1000, 0);  // b gives no work_seq (a replica from before them)
  pool.poll_now();
  const double base = work(ra);

  // Another router's send, announced: counted here too.
  pool.note_announced_work(ra, KvWork{5, 300, 2, "ffffffffffffffff-1"});
  EXPECT_NEAR(work(ra), base + 300, 1e-6);
  EXPECT_EQ(pool.get(ra)->announced_work, 300);
  EXPECT_EQ(pool.get(ra)->waiting_sequences, 2);
  EXPECT_EQ(pool.get(ra)->unacked_work, 0);
  pool.note_announced_work(ra, KvWork{5, 300, 2, "ffffffffffffffff-1"});  // a repeat
  pool.note_announced_work(ra, KvWork{4, 999, 9, ""});  // held by the last report already
  EXPECT_NEAR(work(ra), base + 300, 1e-6);

  // This router's send: its own until the announcement, then announced (the replica's figure).
  const uint64_t id = pool.note_routed_work(ra, 700, 4);
  EXPECT_NEAR(work(ra), base + 1000, 1e-6);
  EXPECT_EQ(pool.get(ra)->unacked_sequences, 4);
  pool.note_announced_work(ra, KvWork{6, 650, 4, pool.route_of(id)});
  EXPECT_NEAR(work(ra), base + 950, 1e-6);
  EXPECT_EQ(pool.get(ra)->unacked_work, 0);
  EXPECT_EQ(pool.get(ra)->unacked_sequences, 0);
  EXPECT_EQ(pool.get(ra)->announced_work, 950);
  // Route ids are this pool's alone.
  TwoReportersAndAnOldOne other(config);
  EXPECT_NE(other.pool.route_of(id), pool.route_of(id));

  // A report holding announcement 5, not 6: 5 leaves the count, its work is in the report.
  a.set_work(1000, 300);
  a.set_work_seq(5);
  pool.poll_now();
  EXPECT_NEAR(work(ra), base + 300 + 650, 1e-6);
  EXPECT_EQ(pool.get(ra)->announced_work, 650);
  a.set_work(1000, 950);
  a.set_work_seq(6);
  pool.poll_now();
  EXPECT_NEAR(work(ra), base + 950, 1e-6);
  EXPECT_EQ(pool.get(ra)->announced_work, 0);

  // A restart (its seq goes back): what was announced before it is gone.
  pool.note_announced_work(ra, KvWork{7, 100, 1, ""});
  EXPECT_EQ(pool.get(ra)->announced_work, 100);
  a.set_work_seq(0);
  pool.poll_now();
  EXPECT_EQ(pool.get(ra)->announced_work, 0);
  pool.note_announced_work(ra, KvWork{1, 40, 1, ""});
  EXPECT_EQ(pool.get(ra)->announced_work, 40);
  // A restart seen by its computed tokens going back (its seq may have passed the old one):
  // what was announced is dropped, and the new report's numbering taken.
  a.set_work(10, 0);
  a.set_work_seq(9);
  pool.poll_now();
  EXPECT_EQ(pool.get(ra)->announced_work, 0);
  pool.note_announced_work(ra, KvWork{9, 55, 1, ""});  // held by that report
  pool.note_announced_work(ra, KvWork{10, 60, 1, ""});
  EXPECT_EQ(pool.get(ra)->announced_work, 60);

  // No work_seq in b's reports: its announcements are ignored (nothing would ever prune them),
  // and this router's own send stays its own until a report has it.
  const double b_work = work(rb);
  pool.note_announced_work(rb, KvWork{1, 500, 1, ""});
  EXPECT_NEAR(work(rb), b_work, 1e-6);
  EXPECT_EQ(pool.get(rb)->announced_work, 0);
  const uint64_t own = pool.note_routed_work(rb, 70, 1);
  pool.note_announced_work(rb, KvWork{2, 65, 1, pool.route_of(own)});
  EXPECT_EQ(pool.get(rb)->unacked_work, 70);
  EXPECT_NEAR(work(rb), b_work + 70, 1e-6);
  (void)rold;
}

// What to plan per sample for a chat request without max_tokens: the mean of what the healthy
// replicas report planning for one (every router reads the same), the api's prior where none
// reports it (an older replica, a foreign engine, one that has seen no such request end) or the
// one that did went down; a figure past any request's max_tokens is held to it.
TEST(ReplicaPoolCounts, PlannedOpenCompletionIsTheHealthyReplicasMeanElseThePrior) {
  PoolConfig config;
  // Long enough that a loaded machine does not make a healthy fake miss a poll; the stalled one
  // costs this once.
  config.poll_timeout = std::chrono::seconds(1);
  TwoReportersAndAnOldOne f(config);
  auto [a, b, pool, ra, rb] = std::tie(f.a, f.b, f.pool, f.ra, f.rb);
  pool.poll_now();
  EXPECT_EQ(planned_open_completion(pool.snapshot()), kPlannedOpenCompletionTokens);
  a.set_planned_open_completion(100);
  b.set_planned_open_completion(301);
  pool.poll_now();
  EXPECT_EQ(planned_open_completion(pool.snapshot()), 201);  // old reports none: not counted
  // The caller's replicas only (route() passes those serving the request's model).
  EXPECT_EQ(planned_open_completion({*pool.get(ra)}), 100);
  a.set_planned_open_completion(int64_t{1} << 40);
  pool.poll_now();
  EXPECT_EQ(planned_open_completion({*pool.get(ra)}), ApiLimits{}.max_tokens);
  a.set_planned_open_completion(100);
  b.stall();  // b stops answering: its figure leaves the mean
  pool.poll_now();
  ASSERT_FALSE(pool.get(rb)->healthy);
  EXPECT_EQ(planned_open_completion(pool.snapshot()), 100);
}

// A pool on a fake clock whose work figures hardly decay (a test's seconds against a 1,000-hour
// horizon), for the share-of-time tests.
struct UndecayedPool {
  static PoolConfig config() {
    PoolConfig c;
    c.routed_work_horizon = std::chrono::hours(1000);
    return c;
  }
  http::Client client;
  testing::FakeClock clock;
  FleetIndexes indexes{clock};
  ReplicaPool pool{client, indexes, clock, config()};
};

// How busy a replica is: the seconds it reports spent in steps between two reports over the
// time between them, decayed as the routed work is; nothing until two reports, nothing from a
// replica that does not report it, and a restart starts over.
TEST(ReplicaPoolCounts, BusyIsTheShareOfTimeInStepsBetweenReports) {
  testing::FakeReplica::Options o;
  o.report_work = true;
  testing::FakeReplica a(o), quiet(o);
  UndecayedPool p;
  testing::FakeClock& clock = p.clock;
  ReplicaPool& pool = p.pool;
  const uint32_t ra = *pool.add(a.address()), rq = *pool.add(quiet.address());
  a.set_work(0, 0, 100.0);
  quiet.set_work(0, 0);
  pool.poll_now();
  EXPECT_FALSE(pool.get(ra)->busy.has_value());  // one reading: no share yet
  clock.advance(std::chrono::seconds(4));
  a.set_work(10, 0, 103.0);  // 3 of the 4 seconds in steps
  quiet.set_work(10, 0);
  pool.poll_now();
  ASSERT_TRUE(pool.get(ra)->busy.has_value());
  EXPECT_NEAR(*pool.get(ra)->busy, 0.75, 1e-6);
  EXPECT_FALSE(pool.get(rq)->busy.has_value());
  clock.advance(std::chrono::seconds(4));
  a.set_work(20, 0, 104.0);  // then 1 of 4: 4 of 8 in all
  pool.poll_now();
  EXPECT_NEAR(*pool.get(ra)->busy, 0.5, 1e-6);
  clock.advance(std::chrono::seconds(4));
  a.set_work(5, 0, 1.0);  // restarted
  pool.poll_now();
  EXPECT_FALSE(pool.get(ra)->busy.has_value());
}

// The busy time beyond each step's fixed cost (ReplicaView::load_busy): 3 of 4 seconds in steps,
// 100 steps of which each had 10 ms of fixed cost, is 2 s of load (0.5); a replica stepping all
// the time on steps that are nearly all fixed cost (a GPU decoding small batches) is busy and
// hardly loaded. Without steps or a step model there is no such share.
TEST(ReplicaPoolCounts, LoadBusyIsTheBusyTimeBeyondEachStepsFixedCost) {
  testing::FakeReplica::Options o;
  o.report_work = true;
  testing::FakeReplica a(o), idle_steps(o), no_model(o);
  UndecayedPool p;
  testing::FakeClock& clock = p.clock;
  ReplicaPool& pool = p.pool;
  const uint32_t ra = *pool.add(a.address()), ri = *pool.add(idle_steps.address()),
                 rn = *pool.add(no_model.address());
  a.set_work(0, 0, 100.0);
  a.set_steps(1000, 0.01);
  idle_steps.set_work(0, 0, 50.0);
  idle_steps.set_steps(5000, 0.01);
  no_model.set_work(0, 0, 10.0);
  pool.poll_now();
  clock.advance(std::chrono::seconds(4));
  a.set_work(10, 0, 103.0);
  a.set_steps(1100, 0.01);
  idle_steps.set_work(10, 0, 53.9);  // 3.9 s in 380 steps of 10 ms fixed cost each
  idle_steps.set_steps(5380, 0.01);
  no_model.set_work(10, 0, 13.0);
  pool.poll_now();
  ASSERT_TRUE(pool.get(ra)->load_busy.has_value());
  EXPECT_NEAR(*pool.get(ra)->busy, 0.75, 1e-6);
  EXPECT_NEAR(*pool.get(ra)->load_busy, 0.5, 1e-6);
  EXPECT_NEAR(*pool.get(ri)->busy, 0.975, 1e-6);
  EXPECT_NEAR(*pool.get(ri)->load_busy, 0.025, 1e-6);
  EXPECT_TRUE(pool.get(rn)->busy.has_value());
  EXPECT_FALSE(pool.get(rn)->load_busy.has_value());
}

// The routed-work horizon stretches until the fleet's decayed ended requests hold
// routed_work_requests_per_replica per replica: a slow fleet (a request a second here) keeps as
// many requests in the window as a fast one, up to the longest horizon; a fast fleet keeps the
// base horizon.
TEST(ReplicaPoolCounts, TheWorkHorizonHoldsAsManyRequestsOnASlowFleet) {
  testing::FakeReplica::Options o;
  o.report_work = true;
  for (const int per_second : {1, 1000}) {
    testing::FakeReplica a(o);
    http::Client client;
    testing::FakeClock clock;
    FleetIndexes indexes(clock);
    PoolConfig config;
    config.routed_work_horizon = std::chrono::seconds(10);
    config.routed_work_max_horizon = std::chrono::seconds(120);
    config.routed_work_requests_per_replica = 100;
    ReplicaPool pool(client, indexes, clock, config);
    const uint32_t r = *pool.add(a.address());
    double longest = 0;
    for (int i = 0; i < 400; ++i) {
      a.set_work(100 * i, 0, -1, int64_t{per_second} * i);
      pool.poll_now();
      ASSERT_TRUE(pool.get(r)->healthy);
      longest = std::max(longest, pool.routed_work_horizon_s());
      clock.advance(std::chrono::seconds(1));
    }
    if (per_second == 1) {
      EXPECT_GT(pool.routed_work_horizon_s(), 90);  // about 100 s: 100 requests at 1/s
      EXPECT_LE(longest, 120);
    } else {
      EXPECT_DOUBLE_EQ(longest, 10);
    }
  }
}

// A pool of its own: one router's view.
struct OwnPool {
  http::Client client;
  SteadyClock clock;
  FleetIndexes indexes{clock};
  ReplicaPool pool{client, indexes, clock};
};

// The version RouterConfig::weight_version_policy "latest" sends new requests to: the healthy
// replicas' highest rank (router/proxy.cc).
std::string newest_version(const ReplicaPool& pool) {
  std::string newest;
  uint64_t best = 0;
  for (const ReplicaView& r : pool.snapshot()) {
    if (r.healthy && r.weight_version_order > best) {
      best = r.weight_version_order;
      newest = r.weight_version;
    }
  }
  return newest;
}

// The newest weight version used to be the one this router met last, in the order of its own
// polls: a router restarted during a rolling update (or the other router of a pair) that
// happened to read the older version last sent every new request to the older weights. A
// version now ranks by the latest time a replica reports loading it, which every router reads
// alike: routers that met the versions in opposite orders agree, and a version loaded again (a
// rollback) is the newest again.
TEST(ReplicaPoolVersions, RoutersThatSawTheVersionsInEitherOrderAgreeOnTheNewest) {
  testing::FakeReplica::Options o;
  o.replica_id = "r0";
  o.weight_version = "step-1";
  o.weight_loaded_at_ms = 1'700'000'000'000;  // r0 updated first,
  testing::FakeReplica r0(o);
  o.replica_id = "r1";
  o.weight_version = "step-2";
  o.weight_loaded_at_ms = 1'700'000'060'000;  // r1 a minute later
  testing::FakeReplica r1(o);
  OwnPool old_first, new_first;
  ASSERT_TRUE(old_first.pool.add(r0.address()).ok());
  old_first.pool.poll_now();  // meets step-1 first
  ASSERT_TRUE(old_first.pool.add(r1.address()).ok());
  old_first.pool.poll_now();
  ASSERT_TRUE(new_first.pool.add(r1.address()).ok());
  new_first.pool.poll_now();  // meets step-2 first
  ASSERT_TRUE(new_first.pool.add(r0.address()).ok());
  new_first.pool.poll_now();
  for (OwnPool* p : {&old_first, &new_first}) {
    const std::vector<ReplicaView> views = p->pool.snapshot();
    ASSERT_EQ(views.size(), 2u);
    for (const ReplicaView& r : views) {
      ASSERT_TRUE(r.healthy) << r.replica_id << ": " << r.error;
      EXPECT_EQ(p->pool.get(r.index)->weight_version_order, r.weight_version_order);
    }
    EXPECT_EQ(newest_version(p->pool), "step-2");
  }
  // r0 moves on to step-2, then r1 goes back to step-1: step-1 is the one loaded last.
  r0.set_weights("step-2", 1'700'000'120'000);
  r1.set_weights("step-1", 1'700'000'180'000);
  for (OwnPool* p : {&old_first, &new_first}) {
    p->pool.poll_now();
    EXPECT_EQ(newest_version(p->pool), "step-1");
  }
}

// A replica whose id could break a response header (x-kvcascade-replica) is routed under its
// address instead (KvcascadeInfo::replica_id).
TEST(ReplicaPoolIds, AnIdThatIsNotPrintableIsReplacedByTheAddress) {
  testing::FakeReplica::Options o;
  o.replica_id = "r0\r\nx-evil: 1";
  testing::FakeReplica bad(o);
  o.replica_id = "r1";
  testing::FakeReplica good(o);
  OwnPool p;
  const auto b = p.pool.add(bad.address()), g = p.pool.add(good.address());
  ASSERT_TRUE(b.ok() && g.ok());
  p.pool.poll_now();
  const auto vb = p.pool.get(*b), vg = p.pool.get(*g);
  ASSERT_TRUE(vb && vg);
  EXPECT_TRUE(vb->healthy) << vb->error;
  EXPECT_EQ(vb->replica_id, vb->host + ":" + std::to_string(vb->port));
  EXPECT_EQ(vg->replica_id, "r1");
}

// Replicas that report no load time (from before it was reported) rank below those that do, and
// among themselves in the order this router first saw their versions, as all did before.
TEST(ReplicaPoolVersions, VersionsWithoutALoadTimeRankBelowTimedOnesInTheOrderSeen) {
  testing::FakeReplica::Options o;
  o.replica_id = "a";
  o.weight_version = "untimed-a";
  testing::FakeReplica a(o);
  o.replica_id = "b";
  o.weight_version = "untimed-b";
  testing::FakeReplica b(o);
  o.replica_id = "t";
  o.weight_version = "timed";
  o.weight_loaded_at_ms = 1'000;
  testing::FakeReplica t(o);
  OwnPool p;
  ASSERT_TRUE(p.pool.add(a.address()).ok());
  p.pool.poll_now();
  ASSERT_TRUE(p.pool.add(b.address()).ok());
  p.pool.poll_now();
  EXPECT_EQ(newest_version(p.pool), "untimed-b");  // seen last
  ASSERT_TRUE(p.pool.add(t.address()).ok());
  p.pool.poll_now();
  EXPECT_EQ(newest_version(p.pool), "timed");
}

// Waits up to `limit` for `done`.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// A replica publishing KV events (a snapshot of a few blocks), for a pool to subscribe to.
testing::FakeReplica::Options publishing(std::string id) {
  testing::FakeReplica::Options o;
  o.replica_id = std::move(id);
  o.blocks = testing::FakeReplica::blocks_of(std::string(64, 'k'));
  return o;
}

// A destroyed pool used to leave its KV-event feeds open for as long as the client lived (the
// client may outlive the pool), their callbacks bound to the pool. Now the destructor cuts them:
// the replica sees its feed close while the client still runs, with no event sent to notice it.
TEST(ReplicaPoolLifetime, ItsKvEventFeedsEndWithIt) {
  testing::FakeReplica replica(publishing("r"));
  http::Client client;
  SteadyClock clock;
  FleetIndexes indexes(clock);
  auto pool = std::make_unique<ReplicaPool>(client, indexes, clock);
  const uint32_t r = *pool->add(replica.address());
  pool->poll_now();  // healthy and a kvcascade replica: subscribed
  // The fake keeps its feed only after writing the snapshot that makes the index exact.
  ASSERT_TRUE(eventually([&] { return pool->get(r)->exact && replica.feed_open(); },
                         std::chrono::seconds(10)));
  pool.reset();
  EXPECT_TRUE(eventually([&] { return !replica.feed_open(); }, std::chrono::seconds(5)));
  EXPECT_FALSE(replica.publish({KvStored{std::nullopt, {BlockHash{1}}}}));
}

// The client runs a feed's callbacks on its own threads, and may do so after the pool is gone:
// a chunk read as the pool is destroyed, the cut feed's on_done. Those used to reach into the
// destroyed pool (its mutex, its clock). Here the pool lives in storage the test wipes as soon as
// it is destroyed, so a callback that still touched the pool would follow a null clock and crash,
// ASan or not. Events keep coming while the pool is destroyed and after.
TEST(ReplicaPoolLifetime, FeedCallbacksAfterThePoolIsGoneLeaveItAlone) {
  testing::FakeReplica replica(publishing("r"));
  http::Client client;
  SteadyClock clock;
  FleetIndexes indexes(clock);
  alignas(ReplicaPool) std::array<std::byte, sizeof(ReplicaPool)> storage;
  auto* pool = new (storage.data()) ReplicaPool(client, indexes, clock);
  const uint32_t r = *pool->add(replica.address());
  pool->poll_now();
  const bool subscribed = eventually([&] { return pool->get(r)->exact && replica.feed_open(); },
                                     std::chrono::seconds(10));

  std::atomic<bool> stop{false};
  std::atomic<int> published{0};
  std::thread publisher([&] {
    for (uint64_t next = 1; !stop; ++next) {  // new blocks, each its own chain
      if (replica.publish({KvStored{std::nullopt, {BlockHash{next}}}})) ++published;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const bool flowing =
      subscribed && eventually([&] { return published >= 50; }, std::chrono::seconds(10));
  pool->~ReplicaPool();
  std::memset(storage.data(), 0, storage.size());
  const int published_at_destruction = published;
  // The client runs on, events still offered to the feed until it is seen closed, and a while
  // after.
  const bool closed = eventually([&] { return !replica.feed_open(); }, std::chrono::seconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  publisher.join();

  ASSERT_TRUE(subscribed);
  ASSERT_TRUE(flowing) << published << " events published";
  EXPECT_TRUE(closed);
  EXPECT_GE(published_at_destruction, 50);
}

}  // namespace
}  // namespace kvc
