// What a replica assumes for what a request leaves out, on tiny replicas of their own: the
// default max_tokens (capped by the context and the KV pool), response ids across restarts, and
// the EOS ids /v1/info reports as in effect.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/openai_request.h"
#include "http/client.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/model/weights.h"
#include "replica/server/replica_stack.h"
#include "replica/tokenizer/hf_tokenizer.h"
#include "tests/testing/small_tokenizers.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// A tiny replica of its own (64 KV blocks of 16 tokens; the byte tokenizer unless given) on a
// free port.
struct TinyReplica {
  ReplicaStack stack;
  uint16_t port = 0;
  explicit TinyReplica(
      int32_t max_model_len, std::string replica_id = "replica-0",
      ModelConfig model = *preset_config("tiny"),
      std::shared_ptr<const Tokenizer> tokenizer = std::make_shared<ByteTokenizer>())
      : stack(std::make_unique<CpuBackend>(random_weights(model, 3), 64, 16), std::move(tokenizer),
              config(max_model_len, std::move(replica_id))) {
    auto p = stack.listen("127.0.0.1", 0);
    EXPECT_TRUE(p.ok());
    port = p.ok() ? *p : 0;
  }
  static ReplicaStackConfig config(int32_t max_model_len, std::string replica_id) {
    ReplicaStackConfig rc;
    rc.engine.scheduler.max_model_len = max_model_len;
    rc.server.replica_id = std::move(replica_id);
    return rc;
  }
  http::ClientResponse post(const std::string& path, const json& body) const {
    auto r = http::Client().request("127.0.0.1", port, "POST", path, body.dump(),
                                    {{"content-type", "application/json"}}, 60s);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : http::ClientResponse{};
  }
};

// /v1/info's generation_defaults for the tiny model with the end ids `model_eos` (as
// generation_config.json's eos_token_id), served with `tokenizer`.
json generation_defaults(std::vector<int32_t> model_eos,
                         std::shared_ptr<const Tokenizer> tokenizer) {
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = std::max(c.vocab_size, tokenizer->vocab_size());
  c.eos_token_ids = std::move(model_eos);
  const TinyReplica replica(4096, "replica-0", c, std::move(tokenizer));
  auto r = http::Client().request("127.0.0.1", replica.port, "GET", "/v1/info", "", {}, 10s);
  EXPECT_TRUE(r.ok());
  return r.ok() ? json::parse(r->body)["generation_defaults"] : json{};
}

// Without max_tokens the default (16) is capped to what the context leaves, as vLLM does; a
// max_tokens the client gave is held to and refused when it does not fit, as OpenAI refuses it
// (code context_length_exceeded and its message, which clients such as LangChain recognise);
// a prompt that leaves no room is refused so too, with or without max_tokens.
TEST(ReplicaDefaults, DefaultMaxTokensIsCappedToTheContextLeft) {
  const TinyReplica replica(64);
  const std::string prompt(60, 'p');
  const auto capped = replica.post("/v1/completions",
                                   {{"model", "tiny"}, {"prompt", prompt}, {"ignore_eos", true}});
  ASSERT_EQ(capped.status, 200) << capped.body;
  EXPECT_EQ(json::parse(capped.body)["usage"]["completion_tokens"], 4);
  const auto held = replica.post(
      "/v1/completions",
      {{"model", "tiny"}, {"prompt", prompt}, {"ignore_eos", true}, {"max_tokens", 16}});
  EXPECT_EQ(held.status, 400) << held.body;
  const json error = json::parse(held.body)["error"];
  EXPECT_EQ(error["code"], "context_length_exceeded") << held.body;
  EXPECT_EQ(error["param"], "prompt") << held.body;
  EXPECT_EQ(error["message"],
            "This model's maximum context length is 64 tokens. However, you requested 76 tokens "
            "(60 in the prompt, 16 in the completion). Please reduce the length of the prompt or "
            "the completion.");
  const auto chat = replica.post(
      "/v1/chat/completions",
      {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", std::string(70, 'q')}}}}});
  EXPECT_EQ(chat.status, 400) << chat.body;
  const json chat_error = json::parse(chat.body)["error"];
  EXPECT_EQ(chat_error["code"], "context_length_exceeded") << chat.body;
  EXPECT_EQ(chat_error["param"], "messages") << chat.body;
  const std::string m = chat_error["message"];
  EXPECT_EQ(
      m.rfind("This model's maximum context length is 64 tokens. However, the messages have ", 0),
      0u)
      << m;
  EXPECT_NE(m.find("which leaves no room for a completion"), std::string::npos) << m;
}

// Response ids stay unique across restarts: a replica's counter starts at 1 again, its random
// instance tag does not repeat (two stacks of one replica id stand for two runs).
TEST(ReplicaIds, ResponseIdsDifferAcrossRestarts) {
  std::vector<std::string> ids;
  for (int run = 0; run < 2; ++run) {
    const TinyReplica replica(4096, "r0");
    const auto r =
        replica.post("/v1/completions", {{"model", "tiny"}, {"prompt", "id"}, {"max_tokens", 1}});
    ASSERT_EQ(r.status, 200) << r.body;
    ids.push_back(json::parse(r.body)["id"]);
    EXPECT_EQ(ids.back().rfind("cmpl-r0-", 0), 0u) << ids.back();
  }
  EXPECT_NE(ids[0], ids[1]);
}

// A chat reply without max_tokens runs to the end of the context (vLLM's default; OpenAI's is
// unbounded), or as far as the KV pool holds n of them: never refused for a default.
TEST(ReplicaDefaults, ChatRepliesWithoutMaxTokensRunToTheContextOrThePool) {
  for (const auto& [context, n] : {std::pair{96, 1}, std::pair{4096, 8}}) {
    const TinyReplica replica(context);
    const auto r =
        replica.post("/v1/chat/completions",
                     {{"model", "tiny"},
                      {"messages", {{{"role", "user"}, {"content", std::string(40, 'q')}}}},
                      {"n", n},
                      {"ignore_eos", true}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json usage = json::parse(r.body)["usage"];
    const int prompt = usage["prompt_tokens"];
    // The pool's 64 blocks of 16: the prompt's full blocks shared, the rest split over n.
    const int shared = prompt / 16, per_sibling = (64 - shared) / n;
    const int want = std::min(context - prompt, (shared + per_sibling) * 16 - prompt);
    EXPECT_EQ(usage["completion_tokens"], n * want) << "context " << context << " n " << n;
  }
}

// What routers plan for a chat reply without max_tokens: /v1/load's
// planned_open_completion_tokens, null until such a reply whose end was uncertain ended (one
// that only its bound ends, ignore_eos, teaches nothing); then each ended sample moves it 1/64
// of the way from the prior to its length.
TEST(ReplicaDefaults, OpenChatRepliesTeachThePlanRoutersRead) {
  const TinyReplica replica(512);
  auto load_after = [&](int finished) {
    json l;
    for (int i = 0; i < 200; ++i) {  // the figures follow the reply by a moment
      auto r = http::Client().request("127.0.0.1", replica.port, "GET", "/v1/load", "", {}, 10s);
      if (!r.ok()) break;
      l = json::parse(r->body);
      if (l["finished_requests_total"] == finished) break;
      std::this_thread::sleep_for(10ms);
    }
    return l;
  };
  auto chat = [&](bool ignore_eos) {
    const auto r =
        replica.post("/v1/chat/completions",
                     {{"model", "tiny"},
                      {"messages", {{{"role", "user"}, {"content", "Tell me about the sea."}}}},
                      {"ignore_eos", ignore_eos}});
    EXPECT_EQ(r.status, 200) << r.body;
    return r.status == 200 ? json::parse(r.body)["usage"]["completion_tokens"].get<int>() : 0;
  };
  chat(true);
  EXPECT_TRUE(load_after(1)["planned_open_completion_tokens"].is_null());
  const int length = chat(false);
  const json l = load_after(2);
  const double prior = kPlannedOpenCompletionTokens;
  EXPECT_EQ(l["planned_open_completion_tokens"], std::lround(prior + (length - prior) / 64))
      << l.dump() << " length " << length;
}

// /v1/info's eos_token_ids are the ids that end sequences: the tokenizer's EOS tokens and the
// model's end ids applied. The model's end ids are ids of its own tokenizer: with the byte
// tokenizer (whose ids are bytes) they are not applied, and not_applied says so and why.
TEST(ReplicaInfo, EosTokenIdsAreThoseInEffectAndTheIgnoredOnesAreNamed) {
  const json bytes = generation_defaults({2, 3, 4, 256}, std::make_shared<ByteTokenizer>());
  EXPECT_EQ(bytes["eos_token_ids"], json::array({256})) << bytes.dump();
  EXPECT_EQ(bytes["not_applied"], json::array({"eos_token_id"}));
  const std::string reason = bytes["not_applied_reasons"].value("eos_token_id", "");
  EXPECT_EQ(reason.rfind("2, 3, 4:", 0), 0u) << reason;  // 256 is the byte tokenizer's EOS
  EXPECT_NE(reason.find("byte tokenizer"), std::string::npos) << reason;

  auto tokenizer =
      HfTokenizer::from_json(testing::kSentencePieceStyleTokenizer, R"({"eos_token": "</s>"})",
                             R"({"eos_token_id": [7, 1]})");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  std::shared_ptr<const Tokenizer> hf(std::move(*tokenizer));
  // A tokenizer's EOS tokens are applied (and were missing when the model set none).
  const json alone = generation_defaults({}, hf);
  EXPECT_EQ(alone["eos_token_ids"], json({1, 7})) << alone.dump();
  EXPECT_EQ(alone["not_applied"], json::array());
  // The model's own end ids are applied with the model's tokenizer.
  const json both = generation_defaults({5, 7}, hf);
  EXPECT_EQ(both["eos_token_ids"], json({1, 5, 7})) << both.dump();
  EXPECT_EQ(both["not_applied"], json::array());
  EXPECT_EQ(both["not_applied_reasons"], json::object());
}

}  // namespace
}  // namespace kvc
