#include "prefix_index/kv_event.h"

#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvc {
namespace {

using nlohmann::json;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

BlockHash random_hash(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0:
      return BlockHash{0};
    case 1:
      return BlockHash{kMax};
    default:
      return BlockHash{rng()};
  }
}

std::vector<BlockHash> random_hashes(std::mt19937_64& rng, size_t max_count) {
  std::vector<BlockHash> out(rng() % (max_count + 1));
  for (BlockHash& h : out)
    h = random_hash(rng);
  return out;
}

KvEvent random_event(std::mt19937_64& rng) {
  switch (rng() % 7) {
    case 0:
      return KvStored{std::nullopt, random_hashes(rng, 5)};
    case 1:
      return KvStored{random_hash(rng), random_hashes(rng, 5)};
    case 2:
      return KvRemoved{random_hashes(rng, 5)};
    case 3:
      return KvQueued{std::nullopt, random_hashes(rng, 5)};
    case 4:
      return KvQueued{random_hash(rng), random_hashes(rng, 5)};
    case 5:
      return KvWork{1 + rng() % kMax, static_cast<int64_t>(rng() % 1'000'000'000'001),
                    static_cast<int64_t>(rng() % 64),
                    rng() % 2 ? "" : std::to_string(rng()) + "-" + std::to_string(rng() % 9)};
    default:
      return KvCleared{};
  }
}

KvEventBatch random_batch(std::mt19937_64& rng) {
  KvEventBatch batch;
  batch.replica = "replica-" + std::to_string(rng() % 100);
  batch.seq = (rng() % 4 == 0) ? kMax : rng() % 1000;
  batch.snapshot = rng() % 2 == 0;
  for (size_t n = rng() % 6; n > 0; --n)
    batch.events.push_back(random_event(rng));
  return batch;
}

// The error must name `field` first: "events[3].hashes[7]: ...".
template <typename T>
::testing::AssertionResult fails_naming(const Result<T>& r, std::string_view field) {
  if (r.ok()) return ::testing::AssertionFailure() << "decoded successfully";
  const std::string& message = r.error().message;
  if (!message.starts_with(std::string(field) + ": ")) {
    return ::testing::AssertionFailure() << "message '" << message << "' does not name " << field;
  }
  // The message goes into JSON error bodies: it must be valid UTF-8 (a strict dump throws).
  try {
    (void)json(message).dump();
  } catch (const json::exception&) {
    return ::testing::AssertionFailure() << "message is not valid UTF-8";
  }
  return ::testing::AssertionSuccess();
}

const char kValidBatch[] =
    R"({"replica":"r0","seq":12,"snapshot":false,"events":[)"
    R"({"type":"stored","parent":null,"hashes":["0000000000000001","00000000000000ff"]},)"
    R"({"type":"stored","parent":"00000000000000ff","hashes":["ffffffffffffffff"]},)"
    R"({"type":"removed","hashes":["0123456789abcdef"]},{"type":"cleared"}]})";

TEST(BlockHashTextTest, FormatsSixteenLowerCaseDigits) {
  EXPECT_EQ(format_block_hash(BlockHash{0}), "0000000000000000");
  EXPECT_EQ(format_block_hash(BlockHash{kMax}), "ffffffffffffffff");
  EXPECT_EQ(format_block_hash(BlockHash{0xa}), "000000000000000a");
  EXPECT_EQ(format_block_hash(BlockHash{0x0123456789abcdefULL}), "0123456789abcdef");
  EXPECT_EQ(format_block_hash(BlockHash{0xFEDCBA9876543210ULL}), "fedcba9876543210");
}

TEST(BlockHashTextTest, ParsesExactlySixteenHexDigitsOfEitherCase) {
  EXPECT_EQ(parse_block_hash("0000000000000000"), BlockHash{0});
  EXPECT_EQ(parse_block_hash("ffffffffffffffff"), BlockHash{kMax});
  EXPECT_EQ(parse_block_hash("FFFFFFFFFFFFFFFF"), BlockHash{kMax});
  EXPECT_EQ(parse_block_hash("0123456789ABCdef"), BlockHash{0x0123456789abcdefULL});
  for (const std::string_view bad :
       {std::string_view(""), std::string_view("123456789abcdef"),
        std::string_view("00123456789abcdef"), std::string_view("0x23456789abcdef"),
        std::string_view("+123456789abcdef"), std::string_view("-123456789abcdef"),
        std::string_view(" 123456789abcdef"), std::string_view("0123456789abcdeg"),
        std::string_view("0123456789abcde\0", 16), std::string_view("0123456789abcdef ")}) {
    EXPECT_EQ(parse_block_hash(bad), std::nullopt) << bad;
  }
}

TEST(BlockHashTextTest, RoundTripsRandomValues) {
  std::mt19937_64 rng(9);
  for (int i = 0; i < 1000; ++i) {
    const BlockHash h = random_hash(rng);
    EXPECT_EQ(parse_block_hash(format_block_hash(h)), h);
  }
}

TEST(KvEventJsonTest, ExactJsonOfEachKind) {
  EXPECT_EQ(to_json(KvStored{BlockHash{1}, {BlockHash{kMax}, BlockHash{0}}}),
            json::parse(R"({"type":"stored","parent":"0000000000000001",
                            "hashes":["ffffffffffffffff","0000000000000000"]})"));
  EXPECT_EQ(to_json(KvStored{std::nullopt, {}}),
            json::parse(R"({"type":"stored","parent":null,"hashes":[]})"));
  EXPECT_EQ(to_json(KvRemoved{{BlockHash{0xab}}}),
            json::parse(R"({"type":"removed","hashes":["00000000000000ab"]})"));
  EXPECT_EQ(to_json(KvCleared{}), json::parse(R"({"type":"cleared"})"));
  EXPECT_EQ(to_json(KvQueued{BlockHash{2}, {BlockHash{3}}}),
            json::parse(R"({"type":"queued","parent":"0000000000000002",
                            "hashes":["0000000000000003"]})"));
  EXPECT_EQ(to_json(KvQueued{std::nullopt, {BlockHash{3}}}),
            json::parse(R"({"type":"queued","parent":null,"hashes":["0000000000000003"]})"));
  EXPECT_EQ(to_json(KvWork{7, 4096, 4, "00000000000000ab-12"}),
            json::parse(R"({"type":"work","seq":7,"tokens":4096,"sequences":4,)"
                        R"("route":"00000000000000ab-12"})"));
  EXPECT_EQ(to_json(KvWork{1, 0, 0, ""}),
            json::parse(R"({"type":"work","seq":1,"tokens":0,"sequences":0,"route":null})"));
}

// A work announcement (KvWork): seq from 1, tokens and sequences from 0, integers; the route a
// string or null (or absent), at most max_route_bytes.
TEST(KvEventDecodeTest, WorkFieldsAreCheckedAndNamed) {
  auto work = [](std::string fields) {
    return decode_kv_event(json::parse(R"({"type":"work",)" + fields + "}"));
  };
  Result<KvEvent> ok = work(R"("seq":3,"tokens":10,"sequences":2)");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(*ok, KvEvent(KvWork{3, 10, 2, ""}));
  EXPECT_TRUE(work(R"("seq":3,"tokens":10,"sequences":2,"route":null)").ok());
  EXPECT_TRUE(fails_naming(work(R"("tokens":10,"sequences":2)"), "seq"));
  EXPECT_TRUE(fails_naming(work(R"("seq":0,"tokens":10,"sequences":2)"), "seq"));
  EXPECT_TRUE(fails_naming(work(R"("seq":1.5,"tokens":10,"sequences":2)"), "seq"));
  EXPECT_TRUE(fails_naming(work(R"("seq":"1","tokens":10,"sequences":2)"), "seq"));
  EXPECT_TRUE(work(R"("seq":18446744073709551615,"tokens":10,"sequences":2)").ok());
  EXPECT_TRUE(fails_naming(work(R"("seq":18446744073709551616,"tokens":10,"sequences":2)"), "seq"));
  EXPECT_TRUE(
      fails_naming(work(R"("seq":1,"tokens":9223372036854775808,"sequences":2)"), "tokens"));
  EXPECT_TRUE(fails_naming(work(R"("seq":1,"tokens":-1,"sequences":2)"), "tokens"));
  EXPECT_TRUE(fails_naming(work(R"("seq":1,"sequences":2)"), "tokens"));
  EXPECT_TRUE(fails_naming(work(R"("seq":1,"tokens":1,"sequences":null)"), "sequences"));
  EXPECT_TRUE(fails_naming(work(R"("seq":1,"tokens":1,"sequences":1,"route":5)"), "route"));
  EXPECT_TRUE(fails_naming(
      work(R"("seq":1,"tokens":1,"sequences":1,"route":")" + std::string(257, 'x') + "\""),
      "route"));
  EXPECT_TRUE(
      work(R"("seq":1,"tokens":1,"sequences":1,"route":")" + std::string(256, 'x') + "\"").ok());
  // Bounded, since routers add them up (KvEventLimits::max_work_tokens, max_work_sequences).
  EXPECT_TRUE(work(R"("seq":1,"tokens":1000000000000,"sequences":1048576)").ok());
  EXPECT_TRUE(fails_naming(work(R"("seq":1,"tokens":1000000000001,"sequences":1)"), "tokens"));
  EXPECT_TRUE(fails_naming(work(R"("seq":1,"tokens":1,"sequences":1048577)"), "sequences"));
  // Inside a batch the field is named with the event's place.
  EXPECT_TRUE(
      fails_naming(decode_kv_event_batch(
                       R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"cleared"},)"
                       R"({"type":"work","seq":1,"tokens":-4,"sequences":0}]})"),
                   "events[1].tokens"));
}

TEST(KvEventJsonTest, EncodesBatchAsOneCompactLine) {
  const KvEventBatch batch{"r0", 12, true, {KvCleared{}, KvRemoved{{BlockHash{2}}}}};
  EXPECT_EQ(encode_kv_event_batch(batch),
            R"({"events":[{"type":"cleared"},{"hashes":["0000000000000002"],"type":"removed"}],)"
            R"("replica":"r0","seq":12,"snapshot":true})");
}

TEST(KvEventJsonTest, EventsRoundTrip) {
  std::mt19937_64 rng(10);
  for (int i = 0; i < 500; ++i) {
    const KvEvent event = random_event(rng);
    Result<KvEvent> decoded = decode_kv_event(to_json(event));
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(*decoded, event) << to_json(event).dump();
  }
}

TEST(KvEventJsonTest, BatchesRoundTrip) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    const KvEventBatch batch = random_batch(rng);
    const std::string text = encode_kv_event_batch(batch);
    EXPECT_EQ(text.find('\n'), std::string::npos);
    EXPECT_EQ(text, to_json(batch).dump());  // nlohmann's own text of the batch, byte for byte
    EXPECT_EQ(encode_kv_event_batch(batch.replica, batch.seq, batch.snapshot,
                                    encode_kv_events(batch.events)),
              text);
    Result<KvEventBatch> decoded = decode_kv_event_batch(text);
    ASSERT_TRUE(decoded.ok()) << decoded.error().message;
    EXPECT_EQ(*decoded, batch) << text;
  }
}

TEST(KvEventJsonTest, DecodesHandWrittenBatch) {
  Result<KvEventBatch> decoded = decode_kv_event_batch(kValidBatch);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  const KvEventBatch expected{"r0",
                              12,
                              false,
                              {KvStored{std::nullopt, {BlockHash{1}, BlockHash{0xff}}},
                               KvStored{BlockHash{0xff}, {BlockHash{kMax}}},
                               KvRemoved{{BlockHash{0x0123456789abcdefULL}}}, KvCleared{}}};
  EXPECT_EQ(*decoded, expected);
}

TEST(KvEventJsonTest, ParentMayBeAbsentOrNullAndUpperCaseHashesAreAccepted) {
  Result<KvEvent> absent =
      decode_kv_event(json::parse(R"({"type":"stored","hashes":["00000000000000AB"]})"));
  ASSERT_TRUE(absent.ok()) << absent.error().message;
  EXPECT_EQ(*absent, KvEvent(KvStored{std::nullopt, {BlockHash{0xab}}}));
  Result<KvEvent> null =
      decode_kv_event(json::parse(R"({"type":"stored","parent":null,"hashes":[]})"));
  ASSERT_TRUE(null.ok()) << null.error().message;
  EXPECT_EQ(*null, KvEvent(KvStored{std::nullopt, {}}));
}

TEST(KvEventJsonTest, IgnoresUnknownFields) {
  Result<KvEventBatch> decoded = decode_kv_event_batch(
      R"({"replica":"r1","seq":0,"snapshot":true,"version":2,"extra":{"a":[1,2]},)"
      R"("events":[{"type":"removed","hashes":[],"reason":"lru"},{"type":"cleared","why":1}]})");
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, (KvEventBatch{"r1", 0, true, {KvRemoved{}, KvCleared{}}}));
}

TEST(KvEventJsonTest, AcceptsNonNegativeSignedSeqFromCode) {
  // A json built in code holds 5 as a signed integer.
  EXPECT_TRUE(
      decode_kv_event_batch(
          json{{"replica", "r"}, {"seq", 5}, {"snapshot", false}, {"events", json::array()}}.dump())
          .ok());
}

TEST(KvEventDecodeTest, EveryTruncationIsAnError) {
  const std::string_view text = kValidBatch;
  ASSERT_TRUE(decode_kv_event_batch(text).ok());
  for (size_t cut = 0; cut < text.size(); ++cut) {
    EXPECT_TRUE(fails_naming(decode_kv_event_batch(text.substr(0, cut)), "kv event batch"))
        << "cut at " << cut;
  }
}

struct BadBatch {
  const char* text;
  const char* field;
};

TEST(KvEventDecodeTest, MalformedInputNamesTheField) {
  const BadBatch cases[] = {
      {"", "kv event batch"},
      {"   ", "kv event batch"},
      {"[]", "kv event batch"},
      {"42", "kv event batch"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[]} x)", "kv event batch"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[]}{})", "kv event batch"},
      {R"({"seq":1,"snapshot":false,"events":[]})", "replica"},
      {R"({"replica":7,"seq":1,"snapshot":false,"events":[]})", "replica"},
      {R"({"replica":"r","snapshot":false,"events":[]})", "seq"},
      {R"({"replica":"r","seq":"12","snapshot":false,"events":[]})", "seq"},
      {R"({"replica":"r","seq":-1,"snapshot":false,"events":[]})", "seq"},
      {R"({"replica":"r","seq":1.5,"snapshot":false,"events":[]})", "seq"},
      {R"({"replica":"r","seq":18446744073709551616,"snapshot":false,"events":[]})", "seq"},
      {R"({"replica":"r","seq":null,"snapshot":false,"events":[]})", "seq"},
      {R"({"replica":"r","seq":1,"events":[]})", "snapshot"},
      {R"({"replica":"r","seq":1,"snapshot":"false","events":[]})", "snapshot"},
      {R"({"replica":"r","seq":1,"snapshot":0,"events":[]})", "snapshot"},
      {R"({"replica":"r","seq":1,"snapshot":false})", "events"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":{}})", "events"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":"stored"})", "events"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[5]})", "events[0]"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"cleared"},[]]})", "events[1]"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"hashes":[]}]})", "events[0].type"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":3}]})", "events[0].type"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"evicted"}]})",
       "events[0].type"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"Stored","hashes":[]}]})",
       "events[0].type"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"stored"}]})",
       "events[0].hashes"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"removed"}]})",
       "events[0].hashes"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"removed","hashes":"00"}]})",
       "events[0].hashes"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"stored","hashes":null}]})",
       "events[0].hashes"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"removed","hashes":[)"
       R"("0000000000000000",1]}]})",
       "events[0].hashes[1]"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"cleared"},)"
       R"({"type":"stored","hashes":["0000000000000000","000000000000000"]}]})",
       "events[1].hashes[1]"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"stored","hashes":[)"
       R"("00000000000000000"]}]})",
       "events[0].hashes[0]"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"stored","hashes":[)"
       R"("000000000000000g"]}]})",
       "events[0].hashes[0]"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"stored","hashes":[null]}]})",
       "events[0].hashes[0]"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"stored","parent":5,)"
       R"("hashes":[]}]})",
       "events[0].parent"},
      {R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"stored","parent":"12",)"
       R"("hashes":[]}]})",
       "events[0].parent"},
  };
  for (const BadBatch& c : cases) {
    EXPECT_TRUE(fails_naming(decode_kv_event_batch(c.text), c.field)) << c.text;
  }
}

// What a replica takes from a request's x-kvcascade-route header: a router's route id (hex, digits
// and '-', 1-64 bytes); anything else is dropped, and a route that got into an event anyway
// (invalid UTF-8) is encoded with replacement characters, not thrown on.
TEST(KvEventJsonTest, RouteIdsAreCheckedAndEncodingNeverThrows) {
  EXPECT_TRUE(KvWork::valid_route("0123456789abcdef-42"));
  EXPECT_TRUE(KvWork::valid_route(std::string(64, 'a')));
  EXPECT_FALSE(KvWork::valid_route(""));
  EXPECT_FALSE(KvWork::valid_route(std::string(65, 'a')));
  EXPECT_FALSE(KvWork::valid_route("0123456789ABCDEF-42"));
  EXPECT_FALSE(KvWork::valid_route("abc def"));
  EXPECT_FALSE(KvWork::valid_route("abc\xff"));
  EXPECT_FALSE(KvWork::valid_route(std::string("ab\0c", 4)));
  const std::vector<KvEvent> events{KvWork{1, 2, 3, "bad \xff\xfe route"}};
  std::string text;
  ASSERT_NO_THROW(text = encode_kv_events(events));
  EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos) << text;  // U+FFFD
}

TEST(KvEventDecodeTest, HashErrorMessageIsExact) {
  Result<KvEventBatch> r = decode_kv_event_batch(
      R"({"replica":"r","seq":1,"snapshot":false,"events":[{"type":"cleared"},)"
      R"({"type":"removed","hashes":["0000000000000000","xyz"]}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "events[1].hashes[1]: expected a 16-digit hex string");
}

TEST(KvEventDecodeTest, LoneEventErrorsNameTheField) {
  EXPECT_TRUE(fails_naming(decode_kv_event(json(5)), "event"));
  EXPECT_TRUE(fails_naming(decode_kv_event(json::array()), "event"));
  EXPECT_TRUE(fails_naming(decode_kv_event(json::object()), "type"));
  EXPECT_TRUE(
      fails_naming(decode_kv_event(json{{"type", "stored"}, {"hashes", {7}}}), "hashes[0]"));
  // Built in code, so the type string can hold invalid UTF-8; the message must still be valid.
  EXPECT_TRUE(fails_naming(decode_kv_event(json{{"type", "\xff\xfe"}}), "type"));
}

std::string batch_with_hashes(size_t count) {
  KvEventBatch batch{"r", 1, false, {KvStored{std::nullopt, std::vector<BlockHash>(count)}}};
  return encode_kv_event_batch(batch);
}

std::string batch_with_events(size_t count) {
  KvEventBatch batch{"r", 1, false, std::vector<KvEvent>(count, KvCleared{})};
  return encode_kv_event_batch(batch);
}

TEST(KvEventLimitsTest, RejectsArraysOverTheLimit) {
  KvEventLimits limits;
  limits.max_hashes_per_event = 4;
  limits.max_events_per_batch = 3;
  EXPECT_TRUE(decode_kv_event_batch(batch_with_hashes(4), limits).ok());
  EXPECT_TRUE(
      fails_naming(decode_kv_event_batch(batch_with_hashes(5), limits), "events[0].hashes"));
  EXPECT_TRUE(decode_kv_event_batch(batch_with_events(3), limits).ok());
  EXPECT_TRUE(fails_naming(decode_kv_event_batch(batch_with_events(4), limits), "events"));

  const json removed = {{"type", "removed"},
                        {"hashes", std::vector<std::string>(5, "0000000000000000")}};
  Result<KvEvent> r = decode_kv_event(removed, limits);
  ASSERT_TRUE(fails_naming(r, "hashes"));
  EXPECT_EQ(r.error().message, "hashes: 5 entries, over max_hashes_per_event (4)");
}

TEST(KvEventLimitsTest, DefaultLimitRejectsTooManyEvents) {
  const KvEventLimits defaults;
  const std::string text = batch_with_events(defaults.max_events_per_batch + 1);
  ASSERT_LT(text.size(), defaults.max_text_bytes);
  Result<KvEventBatch> r = decode_kv_event_batch(text);
  ASSERT_TRUE(fails_naming(r, "events"));
  EXPECT_EQ(r.error().message, "events: 65537 entries, over max_events_per_batch (65536)");
}

TEST(KvEventLimitsTest, RejectsTextOverMaxTextBytes) {
  const std::string_view text = kValidBatch;
  KvEventLimits limits;
  limits.max_text_bytes = text.size();
  EXPECT_TRUE(decode_kv_event_batch(text, limits).ok());
  limits.max_text_bytes = text.size() - 1;
  EXPECT_TRUE(fails_naming(decode_kv_event_batch(text, limits), "kv event batch"));
  // Rejected on size alone, before the (invalid) text is looked at.
  Result<KvEventBatch> r = decode_kv_event_batch(std::string(text.size(), '{'), limits);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("max_text_bytes"), std::string::npos) << r.error().message;
}

TEST(KvEventUnicodeTest, RejectsInvalidUtf8AndLoneSurrogates) {
  const std::string tail = R"(","seq":1,"snapshot":false,"events":[]})";
  for (const std::string& replica :
       {std::string("r\xff\xfe"), std::string("\xc3"), std::string("\xed\xa0\x80"),
        std::string(R"(\ud800)"), std::string(R"(\udc00x)"), std::string(R"(\ud800\u0041)")}) {
    EXPECT_TRUE(
        fails_naming(decode_kv_event_batch(R"({"replica":")" + replica + tail), "kv event batch"))
        << replica;
  }
}

TEST(KvEventUnicodeTest, AcceptsValidUtf8AndSurrogatePairs) {
  const std::string tail = R"(","seq":1,"snapshot":false,"events":[]})";
  Result<KvEventBatch> pair = decode_kv_event_batch(R"({"replica":"\ud83d\ude42)" + tail);
  ASSERT_TRUE(pair.ok()) << pair.error().message;
  EXPECT_EQ(pair->replica, "\xf0\x9f\x99\x82");
  Result<KvEventBatch> raw = decode_kv_event_batch("{\"replica\":\"gpu-\xc3\xa9" + tail);
  ASSERT_TRUE(raw.ok()) << raw.error().message;
  EXPECT_EQ(raw->replica, "gpu-\xc3\xa9");
}

TEST(KvEventUnicodeTest, EncodingInvalidUtf8ReplicaDoesNotThrow) {
  const KvEventBatch batch{"r\xff", 1, false, {}};
  std::string text;
  ASSERT_NO_THROW(text = encode_kv_event_batch(batch));
  Result<KvEventBatch> decoded = decode_kv_event_batch(text);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(decoded->replica, "r\xef\xbf\xbd");  // U+FFFD
}

// The two-part encoding (the events once, the replica and seq around them) gives nlohmann's
// own text for every replica name: quotes, control characters, non-ASCII, invalid UTF-8.
TEST(KvEventUnicodeTest, TwoPartEncodingEscapesReplicaNamesAsNlohmannDoes) {
  for (const std::string name : {"a\"b\\c", "tab\there\n", "gpu-\xc3\xa9", "r\xff\xfe", ""}) {
    const KvEventBatch batch{name, 7, true, {KvCleared{}, KvRemoved{{BlockHash{9}}}}};
    EXPECT_EQ(encode_kv_event_batch(batch),
              to_json(batch).dump(-1, ' ', false, json::error_handler_t::replace))
        << name;
  }
}

}  // namespace
}  // namespace kvc
