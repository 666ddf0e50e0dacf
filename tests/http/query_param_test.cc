#include "http/server.h"

#include <gtest/gtest.h>

namespace kvc::http {
namespace {

TEST(QueryParamTest, FindsAValueAmongPairsAsSent) {
  EXPECT_EQ(query_param("/v1/kv_events?queued=1", "queued"), "1");
  EXPECT_EQ(query_param("/v1/kv_events?a=2&queued=1&b", "queued"), "1");
  EXPECT_EQ(query_param("/v1/kv_events?a=2&b", "b"), "");
  EXPECT_EQ(query_param("/v1/kv_events?queued=", "queued"), "");
  EXPECT_EQ(query_param("/x?q=a=b", "q"), "a=b");
  EXPECT_EQ(query_param("/v1/kv_events", "queued"), std::nullopt);
  EXPECT_EQ(query_param("/v1/kv_events?", "queued"), std::nullopt);
  EXPECT_EQ(query_param("/v1/kv_events?queuedx=1&xqueued=1", "queued"), std::nullopt);
  EXPECT_EQ(query_param("/v1/kv_events?Queued=1", "queued"), std::nullopt);  // as sent
  EXPECT_EQ(query_param("/p?a=1&&queued=2", "queued"), "2");
}

}  // namespace
}  // namespace kvc::http
