// Trace lines, the reader's errors (with line numbers) and the synthetic mixes.
#include "bench/trace.h"

#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

namespace kvc::bench {
namespace {

TraceMix small(const std::string& name, int32_t requests = 400) {
  TraceMix m = *trace_mix(name);
  m.requests = requests;
  return m;
}

TEST(Trace, LinesRoundTrip) {
  for (const std::string& name : trace_mix_names()) {
    const std::vector<TraceRequest> trace = generate_trace(small(name));
    std::stringstream s;
    write_trace(s, trace);
    auto back = read_trace(s, "t.jsonl");
    ASSERT_TRUE(back.ok()) << back.error().message;
    ASSERT_EQ(back->size(), trace.size());
    for (size_t i = 0; i < trace.size(); ++i)
      EXPECT_EQ(trace_line((*back)[i]), trace_line(trace[i]));
  }
}

TEST(Trace, MixesAreDeterministicSortedAndExactlySized) {
  for (const std::string& name : trace_mix_names()) {
    const auto a = generate_trace(small(name)), b = generate_trace(small(name));
    ASSERT_EQ(a.size(), 400u) << name;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(trace_line(a[i]), trace_line(b[i]));
      if (i > 0) {
        EXPECT_LE(a[i - 1].arrival_s, a[i].arrival_s);
      }
    }
    TraceMix other = small(name);
    other.seed = 2;
    EXPECT_NE(trace_line(generate_trace(other)[5]), trace_line(a[5]));
  }
  EXPECT_FALSE(trace_mix("nope").ok());
}

TEST(Trace, RlMixHasBothShapesOfSteps) {
  // 2,046 requests cut group rl47-p1 after 5 of its 16 members (seed 1).
  for (int32_t requests : {2000, 2046}) {
    const auto trace = generate_trace(small("rl", requests));
    std::map<std::string, int> group_members, declared;
    int with_n = 0;
    for (const TraceRequest& r : trace) {
      if (!r.group.empty()) {
        ++group_members[r.group];
        declared[r.group] = r.group_size;
        EXPECT_EQ(r.n, 1);
      }
      if (r.n == 16) ++with_n;
    }
    EXPECT_GT(with_n, 0);
    ASSERT_FALSE(group_members.empty());
    // Every group but possibly the last is whole; every group declares what the trace holds (a
    // group cut by the request count declares its remaining members).
    int whole = 0;
    for (const auto& [g, count] : group_members) {
      whole += count == 16;
      EXPECT_EQ(declared[g], count) << g << " of " << requests << " requests";
    }
    EXPECT_GE(whole, static_cast<int>(group_members.size()) - 1);
    if (requests == 2046) {
      EXPECT_EQ(group_members["rl47-p1"], 5);
    }
  }
}

TEST(Trace, ChatTurnsExtendTheirSessionAndNearMissesDivergeEarly) {
  const auto trace = generate_trace(small("mixed", 1000));
  std::map<std::string, size_t> last_turn_messages;
  int chats = 0, near_misses = 0, sampled = 0;
  for (const TraceRequest& r : trace) {
    if (r.is_chat()) {
      ++chats;
      EXPECT_FALSE(r.session.empty());
      auto [it, fresh] = last_turn_messages.try_emplace(r.session, 0);
      EXPECT_GT(r.messages.size(), it->second);  // each turn adds a reply and a question
      it->second = r.messages.size();
      EXPECT_EQ(r.messages[0]["role"], "system");
    } else if (r.tenant != "rl") {
      EXPECT_EQ(r.prompt.rfind("You are the assistant of tenant ", 0), 0u);
      near_misses += r.prompt.find("[now: ") == 40 ? 1 : 0;
    }
    sampled += r.n == 8;
  }
  EXPECT_GT(chats, 100);
  EXPECT_GT(near_misses, 20);
  EXPECT_GT(sampled, 20);
}

TEST(Trace, ReaderNamesTheLineOfEachError) {
  const std::pair<std::string, std::string> bad[] = {
      {"{\"arrival_s\": 1, \"prompt\": \"x\"", "not valid JSON"},
      {"[1, 2]", "not a JSON object"},
      {"{\"prompt\": \"x\"}", "missing \"arrival_s\""},
      {"{\"arrival_s\": -1, \"prompt\": \"x\"}", "\"arrival_s\" must be"},
      {"{\"arrival_s\": 1}", "exactly one of"},
      {"{\"arrival_s\": 1, \"prompt\": \"x\", \"messages\": [{}]}", "exactly one of"},
      {"{\"arrival_s\": 1, \"messages\": []}", "non-empty array"},
      {"{\"arrival_s\": 1, \"prompt\": 5}", "\"prompt\" must be a string"},
      {"{\"arrival_s\": 1, \"prompt\": \"x\", \"n\": 0}", "\"n\" must be an integer"},
      {"{\"arrival_s\": 1, \"prompt\": \"x\", \"n\": 1.5}", "\"n\" must be an integer"},
      {"{\"arrival_s\": 1, \"prompt\": \"x\", \"max_tokens\": \"9\"}", "must be a number"},
      {"{\"arrival_s\": 1, \"prompt\": \"x\", \"tenant\": 3}", "\"tenant\" must be a string"},
  };
  for (const auto& [line, why] : bad) {
    std::stringstream s("{\"arrival_s\": 0, \"prompt\": \"ok\"}\n\n" + line + "\n");
    auto r = read_trace(s, "trace.jsonl");
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_NE(r.error().message.find("trace.jsonl:3: "), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  }
  std::stringstream ok(
      "{\"arrival_s\": 2, \"prompt\": \"b\"}\n  \n{\"arrival_s\": 1, \"messages\": [{\"role\": "
      "\"user\", \"content\": \"a\"}], \"n\": 4, \"group\": \"g\", \"group_size\": 4}\n");
  auto r = read_trace(ok, "x");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_TRUE((*r)[0].is_chat());  // sorted by arrival
  EXPECT_EQ((*r)[0].n, 4);
  EXPECT_EQ((*r)[0].group_size, 4);
  EXPECT_EQ((*r)[1].max_tokens, 16);
}

}  // namespace
}  // namespace kvc::bench
