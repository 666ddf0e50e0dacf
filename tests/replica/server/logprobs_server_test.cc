// Logprobs and token ids over the replica's HTTP API (completions and chat, whole and streamed),
// with the tiny model on the CPU backend (replica_server_fixture.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "http/sse.h"
#include "replica/server/local_replica.h"
#include "replica/server/token_json.h"
#include "tests/replica/server/replica_server_fixture.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using testing::kPrompt;
using testing::ReplicaServerTest;

struct StreamedChoice {
  json logprobs = {{"tokens", json::array()},
                   {"token_logprobs", json::array()},
                   {"top_logprobs", json::array()},
                   {"text_offset", json::array()}};
  json content = json::array();
  json token_ids = json::array();
  json prompt_token_ids;
};

std::map<int, StreamedChoice> gather_stream(const std::string& body) {
  http::SseParser parser;
  auto events = parser.feed(body);
  EXPECT_TRUE(events.ok());
  std::map<int, StreamedChoice> out;
  if (!events.ok()) return out;
  for (const auto& e : *events) {
    if (e.data == "[DONE]") continue;
    const json chunk = json::parse(e.data);
    for (const auto& c : chunk["choices"]) {
      StreamedChoice& s = out[c["index"].get<int>()];
      if (c.contains("prompt_token_ids")) s.prompt_token_ids = c["prompt_token_ids"];
      for (const auto& id : c.value("token_ids", json::array()))
        s.token_ids.push_back(id);
      const json& lp = c["logprobs"];
      if (lp.is_null()) continue;
      if (lp.contains("content")) {
        for (const auto& t : lp["content"])
          s.content.push_back(t);
        continue;
      }
      for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (const auto& v : lp[k])
          s.logprobs[k].push_back(v);
    }
  }
  return out;
}

// A completion streamed: each choice's token ids, prompt ids, tokens, text offsets and logprobs
// as the same request answered whole.
void expect_stream_equals_whole(const std::map<int, StreamedChoice>& streamed, const json& whole) {
  ASSERT_EQ(streamed.size(), whole["choices"].size());
  for (const auto& [i, c] : streamed) {
    const json& w = whole["choices"][i];
    EXPECT_EQ(c.token_ids, w["token_ids"]);
    EXPECT_EQ(c.prompt_token_ids, w["prompt_token_ids"]);
    EXPECT_EQ(c.logprobs["tokens"], w["logprobs"]["tokens"]);
    EXPECT_EQ(c.logprobs["text_offset"], w["logprobs"]["text_offset"]);
    ASSERT_EQ(c.logprobs["token_logprobs"].size(), w["logprobs"]["token_logprobs"].size());
    for (size_t k = 0; k < w["logprobs"]["token_logprobs"].size(); ++k) {
      EXPECT_FLOAT_EQ(c.logprobs["token_logprobs"][k].get<float>(),
                      w["logprobs"]["token_logprobs"][k].get<float>());
    }
  }
}

// vLLM's stop_reason: the stop token id or stop string that ended a choice, null when EOS or
// the length did (or while it runs, in a stream's chunks).
TEST_F(ReplicaServerTest, StopReasonNamesTheStopTokenOrStringWholeAndStreamed) {
  const json base = {{"model", "tiny"},  {"prompt", kPrompt},  {"max_tokens", 32},
                     {"temperature", 0}, {"ignore_eos", true}, {"return_token_ids", true}};
  const json free = json::parse(post("/v1/completions", base.dump()).body)["choices"][0];
  EXPECT_EQ(free["finish_reason"], "length");
  ASSERT_TRUE(free.contains("stop_reason"));
  EXPECT_TRUE(free["stop_reason"].is_null());
  const auto ids = free["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 32u);

  json by_token = base;
  by_token["stop_token_ids"] = {ids[4]};
  const json t = json::parse(post("/v1/completions", by_token.dump()).body)["choices"][0];
  EXPECT_EQ(t["finish_reason"], "stop");
  EXPECT_EQ(t["stop_reason"], ids[4]);

  // A printable byte of the run (the byte tokenizer's ids are bytes) as a stop string.
  const auto printable = std::find_if(ids.begin() + 1, ids.end(), [](int32_t id) {
    return id > ' ' && id < 127 && id != '"' && id != '\\';
  });
  ASSERT_NE(printable, ids.end());
  json by_string = base;
  by_string["stop"] = {std::string(1, static_cast<char>(*printable))};
  const json st = json::parse(post("/v1/completions", by_string.dump()).body)["choices"][0];
  EXPECT_EQ(st["finish_reason"], "stop");
  EXPECT_EQ(st["stop_reason"], std::string(1, static_cast<char>(*printable)));

  // Streamed: null in every chunk but the one that finishes the choice.
  by_token["stream"] = true;
  const auto r = post("/v1/completions", by_token.dump());
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.header("cache-control").value_or("?"), "no-cache");  // http::event_stream_headers
  EXPECT_EQ(r.header("x-accel-buffering").value_or("?"), "no");
  http::SseParser parser;
  auto events = parser.feed(r.body);
  ASSERT_TRUE(events.ok());
  int finishing = 0;
  for (const auto& e : *events) {
    if (e.data == "[DONE]") continue;
    const json chunk = json::parse(e.data);
    for (const json& c : chunk["choices"]) {
      ASSERT_TRUE(c.contains("stop_reason")) << c.dump();
      if (c["finish_reason"].is_null()) {
        EXPECT_TRUE(c["stop_reason"].is_null()) << c.dump();
      } else {
        ++finishing;
        EXPECT_EQ(c["stop_reason"], ids[4]);
      }
    }
  }
  EXPECT_EQ(finishing, 1);
}

TEST_F(ReplicaServerTest, CompletionLogprobsAndTokenIdsWholeAndStreamed) {
  json req = {{"model", "tiny"}, {"prompt", kPrompt},  {"n", 2},
              {"max_tokens", 8}, {"seed", 3},          {"temperature", 0.9},
              {"logprobs", 5},   {"ignore_eos", true}, {"return_token_ids", true}};
  const auto r = post("/v1/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json whole = json::parse(r.body);
  const std::vector<int32_t> prompt_ids(kPrompt.begin(), kPrompt.end());  // the byte tokenizer
  for (const json& c : whole["choices"]) {
    EXPECT_EQ(c["prompt_token_ids"].get<std::vector<int32_t>>(), prompt_ids);
    const json& lp = c["logprobs"];
    ASSERT_EQ(c["token_ids"].size(), 8u);
    ASSERT_EQ(lp["tokens"].size(), 8u);
    ASSERT_EQ(lp["token_logprobs"].size(), 8u);
    ASSERT_EQ(lp["top_logprobs"].size(), 8u);
    for (size_t i = 0; i < 8; ++i) {
      const double own = lp["token_logprobs"][i].get<double>();
      EXPECT_LE(own, 0.0);
      const json& top = lp["top_logprobs"][i];
      // The 5 most likely and the sampled token (byte strings may collide after UTF-8
      // replacement, so a dict can hold fewer).
      EXPECT_GE(top.size(), 1u);
      EXPECT_LE(top.size(), 6u);
      double mass = 0, best = -1e9;
      for (const auto& [tok, v] : top.items()) {
        mass += std::exp(v.get<double>());
        best = std::max(best, v.get<double>());
      }
      EXPECT_LE(mass, 1.0 + 1e-4);
      EXPECT_GE(best, own - 1e-6);
      if (i > 0) {  // one byte per token, none for the byte tokenizer's EOS
        const int64_t step =
            lp["text_offset"][i].get<int64_t>() - lp["text_offset"][i - 1].get<int64_t>();
        EXPECT_TRUE(step == 0 || step == 1) << step;
      }
    }
    EXPECT_EQ(lp["text_offset"][0], 0);
  }
  // The same request streamed: the same tokens, logprobs and ids, chunk by chunk.
  req["stream"] = true;
  const auto s = post("/v1/completions", req.dump());
  ASSERT_EQ(s.status, 200);
  expect_stream_equals_whole(gather_stream(s.body), whole);
  // The prompt sent back as its token ids: the same continuation.
  json by_ids = req;
  by_ids.erase("stream");
  by_ids["prompt"] = prompt_ids;
  const json again = json::parse(post("/v1/completions", by_ids.dump()).body);
  EXPECT_EQ(again["choices"][0]["token_ids"], whole["choices"][0]["token_ids"]);
  EXPECT_EQ(again["choices"][1]["token_ids"], whole["choices"][1]["token_ids"]);
  // Greedy: the sampled token is the most likely one, with its logprob.
  json greedy = by_ids;
  greedy["temperature"] = 0;
  const json g = json::parse(post("/v1/completions", greedy.dump()).body);
  const json& glp = g["choices"][0]["logprobs"];
  for (size_t i = 0; i < 8; ++i) {
    double best = -1e9;
    for (const auto& [tok, v] : glp["top_logprobs"][i].items())
      best = std::max(best, v.get<double>());
    EXPECT_FLOAT_EQ(static_cast<float>(best), glp["token_logprobs"][i].get<float>());
  }
  // Without the fields: nulls and no ids, as before.
  const json plain =
      json::parse(post("/v1/completions",
                       json{{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 2}}.dump())
                      .body);
  EXPECT_TRUE(plain["choices"][0]["logprobs"].is_null());
  EXPECT_FALSE(plain["choices"][0].contains("token_ids"));
}

// Completions' top dicts are keyed by the text shown: the pieces of one character (invalid
// UTF-8 alone, each shown as U+FFFD) share the entry of the most likely of them, so no key repeats
// in the response text (a JSON parser would keep one and drop the rest).
TEST(CompletionLogprobsJson, TokensShownAlikeShareTheMostLikelyEntry) {
  ByteTokenizer tokenizer;
  GeneratedToken t;
  t.id = 0xe2;
  t.logprob = -1.0f;
  t.top = {{0xe2, -1.0f}, {0x80, -2.0f}, {'a', -3.0f}};
  Utf8CharCounter offset;
  const json lp =
      completion_logprobs_json(std::span<const GeneratedToken>(&t, 1), tokenizer, offset);
  const json& top = lp["top_logprobs"][0];
  ASSERT_EQ(top.size(), 2u) << top.dump(-1, ' ', false, json::error_handler_t::replace);
  EXPECT_FLOAT_EQ(top["\xef\xbf\xbd"].get<float>(), -1.0f);
  EXPECT_FLOAT_EQ(top["a"].get<float>(), -3.0f);
  const std::string text = lp.dump(-1, ' ', false, json::error_handler_t::replace);
  EXPECT_EQ(json::parse(text)["top_logprobs"][0].size(), 2u) << text;
}

// text_offset counts characters, not bytes: a two-byte character (two byte tokens) moves it by
// one, at the token that begins the character.
TEST(CompletionLogprobsJson, TextOffsetsCountCharacters) {
  ByteTokenizer tokenizer;
  std::vector<GeneratedToken> tokens;
  for (unsigned char b : std::string("a\xc3\xa9"
                                     "b")) {  // a, é (two bytes), b
    GeneratedToken t;
    t.id = b;
    t.text = std::string(1, static_cast<char>(b));
    tokens.push_back(t);
  }
  Utf8CharCounter offset;
  const json lp = completion_logprobs_json(tokens, tokenizer, offset);
  EXPECT_EQ(lp["text_offset"], json::array({0, 1, 2, 2}));
  EXPECT_EQ(offset.count(), 3u);
}

// Bytes that are no character are shown as U+FFFD, each a character of the text: a token after
// them starts where the shown text has it (the offsets index the response's own text).
TEST(CompletionLogprobsJson, TextOffsetsCountTheReplacementsShown) {
  ByteTokenizer tokenizer;
  std::vector<GeneratedToken> tokens;
  for (const std::string piece :
       {"x", "\x80\x80", " y", "\xE2", "a", "\xF0\x9F", "\x98\x80", "!"}) {
    GeneratedToken t;
    t.id = static_cast<unsigned char>(piece[0]);
    t.text = piece;
    tokens.push_back(t);
  }
  Utf8CharCounter offset;
  const json lp = completion_logprobs_json(tokens, tokenizer, offset);
  // Shown: x, U+FFFD U+FFFD, " y", U+FFFD (E2 cut short by "a"), a, U+1F600 (over two tokens), !
  EXPECT_EQ(lp["text_offset"], json::array({0, 1, 3, 5, 6, 7, 8, 8}));
  EXPECT_EQ(offset.count(), 9u);
}

// vLLM's return_tokens_as_token_ids: every token is "token_id:N", so none share an entry, and
// the sampled token's own logprob is under its own key.
TEST(CompletionLogprobsJson, TokenIdNamesKeepEveryEntry) {
  ByteTokenizer tokenizer;
  GeneratedToken t;
  t.id = 0x80;
  t.logprob = -2.0f;
  t.top = {{0xe2, -1.0f}, {0x81, -1.5f}, {'a', -3.0f}};
  Utf8CharCounter offset;
  const json lp = completion_logprobs_json(std::span<const GeneratedToken>(&t, 1), tokenizer,
                                           offset, TokenNames::kIds);
  EXPECT_EQ(lp["tokens"][0], "token_id:128");
  const json& top = lp["top_logprobs"][0];
  ASSERT_EQ(top.size(), 4u) << top.dump();
  EXPECT_FLOAT_EQ(top["token_id:226"].get<float>(), -1.0f);
  EXPECT_FLOAT_EQ(top["token_id:129"].get<float>(), -1.5f);
  EXPECT_FLOAT_EQ(top["token_id:97"].get<float>(), -3.0f);
  EXPECT_FLOAT_EQ(top["token_id:128"].get<float>(), -2.0f);  // the sampled one's own
  const json chat =
      chat_logprobs_json(std::span<const GeneratedToken>(&t, 1), tokenizer, TokenNames::kIds);
  EXPECT_EQ(chat["content"][0]["token"], "token_id:128");
  EXPECT_EQ(chat["content"][0]["bytes"], json::array({0x80}));
  EXPECT_EQ(chat["content"][0]["top_logprobs"][0]["token"], "token_id:226");
}

TEST_F(ReplicaServerTest, ReturnTokensAsTokenIdsNamesTheGeneratedIds) {
  const json req = {{"model", "tiny"},
                    {"prompt", kPrompt},
                    {"max_tokens", 4},
                    {"logprobs", 3},
                    {"seed", 9},
                    {"ignore_eos", true},
                    {"return_token_ids", true},
                    {"return_tokens_as_token_ids", true}};
  const auto r = post("/v1/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json choice = json::parse(r.body)["choices"][0];
  ASSERT_EQ(choice["token_ids"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const std::string name = "token_id:" + std::to_string(choice["token_ids"][i].get<int>());
    EXPECT_EQ(choice["logprobs"]["tokens"][i], name);
    const json& top = choice["logprobs"]["top_logprobs"][i];
    ASSERT_TRUE(top.contains(name)) << top.dump();
    EXPECT_FLOAT_EQ(top[name].get<float>(), choice["logprobs"]["token_logprobs"][i].get<float>());
    EXPECT_GE(top.size(), 3u);
  }
  const auto bad =
      post("/v1/completions",
           json{{"model", "tiny"}, {"prompt", kPrompt}, {"guided_json", json::object()}}.dump());
  EXPECT_EQ(bad.status, 400) << bad.body;
}

TEST_F(ReplicaServerTest, ChatLogprobsHaveContentEntriesWholeAndStreamed) {
  json req = {{"model", "tiny"},    {"messages", {{{"role", "user"}, {"content", kPrompt}}}},
              {"max_tokens", 6},    {"seed", 4},
              {"logprobs", true},   {"top_logprobs", 3},
              {"ignore_eos", true}, {"return_token_ids", true}};
  const auto r = post("/v1/chat/completions", req.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json whole = json::parse(r.body);
  const json& content = whole["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u);
  EXPECT_TRUE(whole["choices"][0]["logprobs"]["refusal"].is_null());
  for (const json& t : content) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_TRUE(t["bytes"].is_array());
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    for (size_t j = 1; j < 3; ++j) {
      EXPECT_GE(t["top_logprobs"][j - 1]["logprob"].get<double>(),
                t["top_logprobs"][j]["logprob"].get<double>());
    }
  }
  // Byte for byte, the tokens are the reply (none is the EOS with these 6).
  std::string bytes;
  for (const json& t : content)
    for (int b : t["bytes"])
      bytes += static_cast<char>(b);
  std::string text_from_ids;
  for (int id : whole["choices"][0]["token_ids"])
    if (id < 256) text_from_ids += static_cast<char>(id);
  EXPECT_EQ(bytes, text_from_ids);
  req["stream"] = true;
  const auto streamed = gather_stream(post("/v1/chat/completions", req.dump()).body);
  ASSERT_EQ(streamed.size(), 1u);
  ASSERT_EQ(streamed.at(0).content.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(streamed.at(0).content[i]["bytes"], content[i]["bytes"]);
    EXPECT_EQ(streamed.at(0).content[i]["top_logprobs"].size(), 3u);
  }
  EXPECT_EQ(streamed.at(0).token_ids, whole["choices"][0]["token_ids"]);
}

// --stream-interval 3: a choice's first token alone, then chunks of three, the last token with
// its finish reason; the same tokens, text, logprobs and ids as one chunk per token.
TEST(ReplicaStreamInterval, ChunksOfTheIntervalCarryWhatTokenByTokenChunksCarry) {
  ReplicaStackConfig config;
  config.server.stream_interval = 3;
  LocalReplica replica("r0", 64, std::move(config));
  ASSERT_NE(replica.port(), 0);
  http::Client client;
  auto post = [&](const json& body) {
    auto r = client.request("127.0.0.1", replica.port(), "POST", "/v1/completions", body.dump(),
                            {{"content-type", "application/json"}}, std::chrono::seconds(60));
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : http::ClientResponse{};
  };
  json req = {{"model", "tiny"}, {"prompt", kPrompt},  {"n", 2},
              {"max_tokens", 8}, {"seed", 3},          {"temperature", 0.9},
              {"logprobs", 2},   {"ignore_eos", true}, {"return_token_ids", true}};
  const json whole = json::parse(post(req).body);
  req["stream"] = true;
  const auto s = post(req);
  ASSERT_EQ(s.status, 200);
  expect_stream_equals_whole(gather_stream(s.body), whole);
  // Chunk sizes and finish reasons per choice, in order.
  http::SseParser parser;
  auto events = parser.feed(s.body);
  ASSERT_TRUE(events.ok());
  std::map<int, std::vector<size_t>> sizes;
  std::map<int, std::string> text;
  std::map<int, json> finish;
  for (const auto& e : *events) {
    if (e.data == "[DONE]") continue;
    const json chunk = json::parse(e.data);
    for (const auto& c : chunk["choices"]) {
      const int i = c["index"].get<int>();
      sizes[i].push_back(c["token_ids"].size());
      text[i] += c["text"].get<std::string>();
      finish[i] = c["finish_reason"];
    }
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(sizes[i], (std::vector<size_t>{1, 3, 3, 1})) << i;
    EXPECT_EQ(text[i], whole["choices"][i]["text"]) << i;
    EXPECT_EQ(finish[i], "length") << i;
  }
}

}  // namespace
}  // namespace kvc
