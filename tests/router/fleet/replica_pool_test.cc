// ReplicaPool's per-replica counts of what this router sent: requests and prompt tokens in flight
// until they end, and the uncached prefill pending until the answer starts (or the try ends).
#include "router/fleet/replica_pool.h"

#include <mutex>

#include <gtest/gtest.h>

#include "base/clock.h"
#include "http/client.h"
#include "prefix_index/radix_index.h"

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

}  // namespace
}  // namespace kvc
