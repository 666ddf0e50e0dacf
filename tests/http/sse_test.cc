#include "http/sse.h"

#include <gtest/gtest.h>

namespace kvc::http {
namespace {

std::vector<SseEvent> feed_all(SseParser& p, std::string_view bytes) {
  auto r = p.feed(bytes);
  EXPECT_TRUE(r.ok());
  return r.ok() ? *r : std::vector<SseEvent>{};
}

bool same(const std::vector<SseEvent>& a, const std::vector<SseEvent>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].event != b[i].event || a[i].data != b[i].data || a[i].id != b[i].id) return false;
  }
  return true;
}

const std::string kStream =
    ": keep-alive comment\r\n"
    "data: {\"a\":1}\r\n"
    "\r\n"
    "event: kv\n"
    "id: 7\n"
    "data: line one\n"
    "data:line two\n"
    "data\n"
    "\n"
    "retry: 100\r"
    "unknown: x\r"
    "data: cr only\r"
    "\r"
    "event: no-data-is-not-dispatched\n"
    "\n"
    "data: [DONE]\n"
    "\n"
    "data: unfinished";

const std::vector<SseEvent> kExpected = {
    {"", "{\"a\":1}", ""},
    {"kv", "line one\nline two\n", "7"},
    {"", "cr only", "7"},
    {"", "[DONE]", "7"},
};

TEST(SseParserTest, ParsesFieldsCommentsAndLineEnds) {
  SseParser p;
  EXPECT_TRUE(same(feed_all(p, kStream), kExpected));
  EXPECT_EQ(p.pending_bytes(), std::string_view("data: unfinished").size());
  auto last = feed_all(p, "\n\n");
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].data, "unfinished");
}

TEST(SseParserTest, SplitAtEveryByteBoundaryGivesTheSameEvents) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    SseParser p;
    auto events = feed_all(p, std::string_view(kStream).substr(0, cut));
    auto rest = feed_all(p, std::string_view(kStream).substr(cut));
    events.insert(events.end(), rest.begin(), rest.end());
    EXPECT_TRUE(same(events, kExpected)) << "cut at " << cut;
  }
  SseParser p;
  std::vector<SseEvent> events;
  for (char c : kStream) {
    auto some = feed_all(p, std::string_view(&c, 1));
    events.insert(events.end(), some.begin(), some.end());
  }
  EXPECT_TRUE(same(events, kExpected));
}

TEST(SseParserTest, CrLfSplitAcrossFeedsIsOneLineEnd) {
  SseParser p;
  EXPECT_TRUE(feed_all(p, "data: a\r").empty());
  EXPECT_TRUE(feed_all(p, "\ndata: b\r").empty());
  auto events = feed_all(p, "\n\r\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a\nb");
}

TEST(SseParserTest, ByteOrderMarkAtStartIsSkipped) {
  SseParser p;
  EXPECT_TRUE(feed_all(p, "\xEF").empty());
  auto events = feed_all(p,
                         "\xBB\xBF"
                         "data: x\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");
}

TEST(SseParserTest, OversizeEventIsAnErrorAndStaysFailed) {
  SseParser p(64);
  EXPECT_TRUE(feed_all(p, "data: " + std::string(40, 'a') + "\n").empty());
  auto r = p.feed("data: " + std::string(40, 'b') + "\n");  // the event passes 64 bytes
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(p.feed("\n").ok());

  SseParser q(64);
  EXPECT_FALSE(q.feed(std::string(100, 'x')).ok());  // one endless line
  EXPECT_EQ(q.pending_bytes(), 0u);

  SseParser ok(64);
  for (int i = 0; i < 100; ++i) {  // many small events never accumulate
    auto events = feed_all(ok, "data: " + std::string(40, 'c') + "\n\n");
    ASSERT_EQ(events.size(), 1u);
  }
}

// A fuzz finding (fuzz/crashes/sse/): the limit used to count the event and an unfinished line
// together, but a finished line alone, so the same stream failed or not depending on where the
// feeds were split.
TEST(SseParserTest, LimitDoesNotDependOnHowTheStreamIsSplit) {
  const std::string stream =
      "data: " + std::string(30, 'a') + "\n" + ": " + std::string(40, 'c') + "\n\n";
  SseParser whole(64);
  const bool whole_ok = whole.feed(stream).ok();
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p(64);
    const bool ok = p.feed(std::string_view(stream).substr(0, cut)).ok() &&
                    p.feed(std::string_view(stream).substr(cut)).ok();
    EXPECT_EQ(ok, whole_ok) << "cut at " << cut;
  }
  EXPECT_FALSE(whole_ok);  // 37 bytes of event + a 42-byte comment line held at once
}

TEST(SseEventTest, WriterRoundTripsThroughParser) {
  std::string wire = sse_event("multi\nline", "kv") + sse_event("{\"x\":1}");
  EXPECT_EQ(sse_event("a"), "data: a\n\n");
  SseParser p;
  auto events = feed_all(p, wire);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].event, "kv");
  EXPECT_EQ(events[0].data, "multi\nline");
  EXPECT_EQ(events[1].event, "");
  EXPECT_EQ(events[1].data, "{\"x\":1}");
}

}  // namespace
}  // namespace kvc::http
