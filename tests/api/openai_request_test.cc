#include "api/openai_request.h"

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/chat_render.h"
#include "api/chat_template.h"

namespace kvc {
namespace {

OpenAiRequest ok(Endpoint e, std::string_view body) {
  auto r = parse_openai_request(e, body);
  EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(r))
      << (std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).message : "");
  return std::holds_alternative<OpenAiRequest>(r) ? std::get<OpenAiRequest>(r) : OpenAiRequest{};
}

ApiError err(Endpoint e, std::string_view body) {
  auto r = parse_openai_request(e, body);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(OpenAiRequest, CompletionsFieldsAndPromptForms) {
  const auto r = ok(Endpoint::kCompletions, R"({"model":"tiny","prompt":"hi","n":8,
      "max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":4,"seed":7,"stop":["\n","END"],
      "stream":true,"stream_options":{"include_usage":true},"group":"g1","cache_salt":"t",
      "ignore_eos":true,"some_unknown_field":{}})");
  EXPECT_EQ(r.model, "tiny");
  EXPECT_EQ(r.prompts, std::vector<std::string>{"hi"});
  EXPECT_EQ(r.n, 8);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.temperature.value_or(-1), 0.5f);
  EXPECT_EQ(r.top_k.value_or(-1), 4);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  EXPECT_EQ(r.group, "g1");
  EXPECT_EQ(r.cache_salt, "t");
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":["a","b"]})").prompts.size(), 2u);
  EXPECT_FALSE(ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x"})").temperature);
  EXPECT_FALSE(ok(Endpoint::kCompletions, R"({"model":"m","prompt":"x"})").top_k);
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":[104,105]})").prompts,
            std::vector<std::string>{"hi"});
  EXPECT_EQ(ok(Endpoint::kCompletions, R"({"model":"m","prompt":[[104],[105]]})").prompts,
            (std::vector<std::string>{"h", "i"}));
}

TEST(OpenAiRequest, TokenIdPromptsLogprobsAndTokenIds) {
  const Endpoint c = Endpoint::kCompletions;
  // Ids of a real tokenizer are kept as ids, text prompts beside them get none.
  const auto r = ok(c, R"({"model":"m","prompt":["ab",[128000,9906],[104]],"logprobs":5,
      "return_token_ids":true})");
  EXPECT_TRUE(r.token_id_prompts);
  ASSERT_EQ(r.prompt_token_ids.size(), 3u);
  EXPECT_TRUE(r.prompt_token_ids[0].empty());
  EXPECT_EQ(r.prompt_token_ids[1], (std::vector<int32_t>{128000, 9906}));
  EXPECT_EQ(r.prompt_token_ids[2], (std::vector<int32_t>{104}));
  EXPECT_EQ(r.prompts[2], "h");  // byte-sized ids: the bytes the byte tokenizer reads
  EXPECT_EQ(r.logprobs, 5);
  EXPECT_TRUE(r.return_token_ids);
  EXPECT_TRUE(ok(c, R"({"model":"m","prompt":"x"})").prompt_token_ids.empty());
  EXPECT_EQ(ok(c, R"({"model":"m","prompt":"x"})").logprobs, -1);
  EXPECT_EQ(ok(c, R"({"model":"m","prompt":"x","logprobs":0})").logprobs, 0);
  EXPECT_EQ(ok(c, R"({"model":"m","prompt":"x","logprobs":null})").logprobs, -1);
  // Chat: logprobs true, top_logprobs k.
  const Endpoint chat = Endpoint::kChatCompletions;
  const std::string msgs = R"({"model":"m","messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(ok(chat, msgs + R"(,"logprobs":true,"top_logprobs":20})").logprobs, 20);
  EXPECT_EQ(ok(chat, msgs + R"(,"logprobs":true})").logprobs, 0);
  EXPECT_EQ(ok(chat, msgs + R"(,"logprobs":false})").logprobs, -1);
  EXPECT_EQ(ok(chat, msgs + "}").logprobs, -1);
}

TEST(OpenAiRequest, ChatRendersMessages) {
  const auto r = ok(Endpoint::kChatCompletions,
                    R"({"model":"m","messages":[{"role":"user","content":"hi"}],
                        "max_completion_tokens":3})");
  EXPECT_EQ(r.prompts, std::vector<std::string>{"<|start|>user\nhi<|end|>\n<|start|>assistant\n"});
  // No special token anywhere in it: a model's tokenizer (one without a template) reads it as
  // text, so "</s>" in a message is not its EOS.
  ASSERT_EQ(r.literal.size(), 1u);
  ASSERT_EQ(r.literal[0].size(), 1u);
  EXPECT_EQ(r.literal[0][0].begin, 0u);
  EXPECT_EQ(r.literal[0][0].end, r.prompts[0].size());
  EXPECT_EQ(r.max_tokens, 3);
  // A null max_completion_tokens beside a max_tokens: the max_tokens.
  EXPECT_EQ(ok(Endpoint::kChatCompletions,
               R"({"model":"m","messages":[{"role":"user","content":"hi"}],
                   "max_completion_tokens":null,"max_tokens":7})")
                .max_tokens,
            7);
  EXPECT_EQ(err(Endpoint::kChatCompletions,
                R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url"}]}]})")
                .param,
            "messages");
}

TEST(OpenAiRequest, InvalidFieldsNameTheField) {
  const Endpoint c = Endpoint::kCompletions;
  EXPECT_EQ(err(c, "{").message.find("invalid JSON"), 0u);
  EXPECT_EQ(err(c, "[1]").status, 400);
  EXPECT_EQ(err(c, R"({"prompt":"x"})").param, "model");
  EXPECT_EQ(err(c, R"({"model":5,"prompt":"x"})").param, "model");
  EXPECT_EQ(err(c, R"({"model":"m"})").param, "prompt");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":""})").param, "prompt");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":{}})").param, "prompt");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":[-300]})").param, "prompt[0]");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","n":0})").param, "n");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","n":100000})").param, "n");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","n":"2"})").param, "n");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","n":1.5})").param, "n");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","max_tokens":0})").param, "max_tokens");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","temperature":-1})").param, "temperature");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","top_p":0})").param, "top_p");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","stop":[1]})").param, "stop");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","stop":["a","b","c","d","e"]})").param, "stop");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","stream":"yes"})").param, "stream");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})").param,
            "stream_options");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","seed":"1"})").param, "seed");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","logprobs":21})").param, "logprobs");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","logprobs":true})").param, "logprobs");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","return_token_ids":1})").param, "return_token_ids");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","prompt_logprobs":1})").param, "prompt_logprobs");
  // vLLM's extensions that change the output: refused unless at their default.
  for (const char* field :
       {R"("use_beam_search":true)", R"("truncate_prompt_tokens":1)",
        R"("guided_json":{"type":"object"})", R"("guided_choice":["a"])", R"("guided_regex":"a+")",
        R"("structured_outputs":{"json":{}})", R"("length_penalty":2)",
        R"("skip_special_tokens":"no")", R"("allowed_token_ids":[1,2])",
        R"("allowed_token_ids":[])", R"("bad_words":["a"])", R"("logits_processors":["f"])",
        R"("vllm_xargs":{"a":1})", R"("chat_template":"{{ x }}")", R"("documents":[{"a":"b"}])",
        R"("add_special_tokens":"no")"}) {
    const std::string body = std::string(R"({"model":"m","prompt":"x",)") + field + "}";
    const std::string key = std::string(field).substr(1, std::string(field).find('"', 1) - 1);
    EXPECT_EQ(err(c, body).param, key) << body;
  }
  for (const char* field :
       {R"("use_beam_search":false)", R"("include_stop_str_in_output":true)",
        R"("skip_special_tokens":false)", R"("spaces_between_special_tokens":false)",
        R"("truncate_prompt_tokens":null)", R"("guided_json":null)",
        R"("guided_decoding_backend":"xgrammar")", R"("length_penalty":1)",
        R"("return_tokens_as_token_ids":true)", R"("bad_words":[])", R"("logits_processors":[])",
        R"("vllm_xargs":{})", R"("add_special_tokens":false)", R"("chat_template":null)"}) {
    const std::string body = std::string(R"({"model":"m","prompt":"x",)") + field + "}";
    EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(parse_openai_request(c, body))) << body;
  }
  EXPECT_TRUE(ok(c, R"({"model":"m","prompt":"x","return_tokens_as_token_ids":true})")
                  .return_tokens_as_token_ids);
  const auto text_options = ok(c, R"({"model":"m","prompt":"x","include_stop_str_in_output":true,
                "skip_special_tokens":false})");
  EXPECT_TRUE(text_options.include_stop_str_in_output);
  EXPECT_FALSE(text_options.skip_special_tokens);
  EXPECT_TRUE(text_options.add_special_tokens);  // a completion's default
  EXPECT_FALSE(
      ok(c, R"({"model":"m","prompt":"x","add_special_tokens":false})").add_special_tokens);
  // Chat: the template writes the special tokens; true is refused, false is the default.
  const std::string hi = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(
      err(Endpoint::kChatCompletions, R"({"model":"m",)" + hi + R"(,"add_special_tokens":true})")
          .param,
      "add_special_tokens");
  EXPECT_FALSE(
      ok(Endpoint::kChatCompletions, R"({"model":"m",)" + hi + R"(,"add_special_tokens":false})")
          .add_special_tokens);
  EXPECT_EQ(err(c, R"({"model":"m","prompt":[1,-2]})").param, "prompt[1]");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":[1,2147483648]})").param, "prompt[1]");
  const Endpoint chat = Endpoint::kChatCompletions;
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  EXPECT_EQ(err(chat, R"({"model":"m",)" + msgs + R"(,"top_logprobs":3})").param, "top_logprobs");
  EXPECT_EQ(err(chat, R"({"model":"m",)" + msgs + R"(,"logprobs":true,"top_logprobs":21})").param,
            "top_logprobs");
  EXPECT_EQ(err(chat, R"({"model":"m",)" + msgs + R"(,"logprobs":5})").param, "logprobs");
  EXPECT_EQ(
      err(c, R"({"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":1}})")
          .param,
      "stream_options.include_usage");
  // vLLM's per-chunk usage is refused, not ignored; false is what happens anyway.
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","stream":true,)"
                   R"("stream_options":{"include_usage":true,"continuous_usage_stats":true}})")
                .param,
            "stream_options.continuous_usage_stats");
  EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(
      parse_openai_request(c, R"({"model":"m","prompt":"x","stream":true,)"
                              R"("stream_options":{"continuous_usage_stats":false}})")));
  const ApiError utf8 = err(c, "{\"model\":\"m\",\"prompt\":\"\xff\xfe\"}");
  EXPECT_NE(utf8.message.find("UTF-8"), std::string::npos) << utf8.message;
}

// Known sampling fields the server does not implement: their neutral values (what clients such
// as LangChain send by default) pass, anything else is refused with the field named, never
// ignored (the tokens would differ from what was asked for).
TEST(OpenAiRequest, SamplingFieldsNotImplementedPassOnlyAtTheirNeutralValues) {
  const Endpoint c = Endpoint::kCompletions, chat = Endpoint::kChatCompletions;
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  for (const char* neutral :
       {R"("frequency_penalty":0)", R"("presence_penalty":0.0)", R"("repetition_penalty":1)",
        R"("min_p":0)", R"("min_tokens":0)", R"("best_of":1)", R"("logit_bias":{})",
        R"("suffix":"")", R"("echo":false)", R"("frequency_penalty":null)"}) {
    EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(
        parse_openai_request(c, R"({"model":"m","prompt":"x",)" + std::string(neutral) + "}")))
        << neutral;
  }
  EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(
      parse_openai_request(c, R"({"model":"m","prompt":"x","n":3,"best_of":3})")));
  EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(
      parse_openai_request(c, R"({"model":"m","prompt":"x","logit_bias":{"7":0}})")));
  // Where nothing ends a choice early, min_tokens holds anyway.
  EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(parse_openai_request(
      c, R"({"model":"m","prompt":"x","ignore_eos":true,"min_tokens":16,"max_tokens":16})")));
  EXPECT_EQ(
      err(c, R"({"model":"m","prompt":"x","ignore_eos":true,"stop":"a","min_tokens":4})").param,
      "min_tokens");
  for (const char* neutral : {R"("response_format":{"type":"text"})", R"("tool_choice":"auto")",
                              R"("tool_choice":"none")", R"("tools":[],"tool_choice":"none")"}) {
    EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(
        parse_openai_request(chat, R"({"model":"m",)" + msgs + "," + neutral + "}")))
        << neutral;
  }
  const std::pair<const char*, const char*> refused[] = {
      {R"("frequency_penalty":0.5)", "frequency_penalty"},
      {R"("frequency_penalty":3)", "frequency_penalty"},
      {R"("frequency_penalty":"0")", "frequency_penalty"},
      {R"("presence_penalty":-1)", "presence_penalty"},
      {R"("repetition_penalty":1.1)", "repetition_penalty"},
      {R"("min_p":0.05)", "min_p"},
      {R"("min_tokens":4)", "min_tokens"},
      {R"("best_of":2)", "best_of"},
      {R"("logit_bias":{"50256":-100})", "logit_bias"},
      {R"("logit_bias":[1])", "logit_bias"},
      {R"("suffix":"end")", "suffix"}};
  for (const auto& [field, param] : refused) {
    const ApiError e = err(c, R"({"model":"m","prompt":"x",)" + std::string(field) + "}");
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_EQ(e.param, param) << field;
  }
  const std::pair<const char*, const char*> chat_refused[] = {
      {R"("response_format":{"type":"json_object"})", "response_format"},
      {R"("response_format":"json")", "response_format"},
      {R"("tool_choice":"required")", "tool_choice"},
      {R"("tool_choice":{"type":"function","function":{"name":"f"}})", "tool_choice"}};
  for (const auto& [field, param] : chat_refused) {
    EXPECT_EQ(err(chat, R"({"model":"m",)" + msgs + "," + field + "}").param, param) << field;
  }
  EXPECT_NE(err(c, R"({"model":"m","prompt":"x","min_p":0.1})").message.find("not supported"),
            std::string::npos);
}

// Extensions (vLLM): stop_token_ids, and add_generation_prompt for chat (false: the prompt ends
// with the conversation as it stands, for the router's hashing and the replica alike).
TEST(OpenAiRequest, StopTokenIdsAndTheGenerationPrompt) {
  const Endpoint c = Endpoint::kCompletions, chat = Endpoint::kChatCompletions;
  EXPECT_EQ(ok(c, R"({"model":"m","prompt":"x","stop_token_ids":[7,128009]})").stop_token_ids,
            (std::vector<int32_t>{7, 128009}));
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","stop_token_ids":[-1]})").param, "stop_token_ids");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","stop_token_ids":7})").param, "stop_token_ids");
  const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string with = ok(chat, R"({"model":"m",)" + msgs + "}").prompts.at(0);
  const std::string without =
      ok(chat, R"({"model":"m",)" + msgs + R"(,"add_generation_prompt":false})").prompts.at(0);
  EXPECT_EQ(with, without + kChatGenerationPrompt);
  EXPECT_EQ(err(chat, R"({"model":"m",)" + msgs + R"(,"add_generation_prompt":1})").param,
            "add_generation_prompt");
  EXPECT_EQ(err(chat, R"({"model":"m",)" + msgs + R"(,"continue_final_message":true})").param,
            "continue_final_message");
  // A router hashes what the replica will: the same bytes, and no refusal of what another
  // engine may take.
  const auto routed =
      parse_openai_request(chat,
                           R"({"model":"m",)" + msgs +
                               R"(,"add_generation_prompt":false,"continue_final_message":true})",
                           {}, {}, ParseMode::kRouting);
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(routed));
  EXPECT_EQ(std::get<OpenAiRequest>(routed).prompts.at(0), without);
}

// nlohmann's lexer reads a NUL byte as the end of input, so a valid JSON text followed by
// "\0garbage" used to parse. A NUL is never valid in JSON text, raw or in a string.
TEST(OpenAiRequest, BytesAfterTheJsonTextAreRefused) {
  const Endpoint c = Endpoint::kCompletions;
  const std::string body = R"({"model":"m","prompt":"x"})";
  ok(c, body);
  ok(c, body + " \r\n\t");  // trailing whitespace is part of JSON text
  for (const std::string& tail : {std::string("\0garbage", 8), std::string(1, '\0'),
                                  std::string(" \0", 2), std::string("x"), std::string("{}")}) {
    const ApiError e = err(c, body + tail);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.message.find("invalid JSON"), 0u) << e.message;
  }
  const ApiError inside = err(c, std::string("{\"model\":\"m\",\"prompt\":\"a\0b\"}", 28));
  EXPECT_EQ(inside.status, 400);
  const ApiError chat = err(Endpoint::kChatCompletions,
                            std::string(R"({"model":"m","messages":[]})") + std::string("\0x", 2));
  EXPECT_EQ(chat.message.find("invalid JSON"), 0u) << chat.message;
}

// Bodies are parsed by simdjson and read as nlohmann documents; what simdjson refuses goes
// through nlohmann for the verdict. The two agree: numbers typed as nlohmann types them, a
// repeated key's last value, escapes and non-ASCII text of a long prompt byte for byte, integers
// past 64 bits and invalid UTF-8 refused with nlohmann's messages.
// A body whose buffer holds padding past its end (http::RequestBody reserves it) is parsed in
// place: the bytes past its size, whatever they are, are not part of it.
TEST(OpenAiRequest, APaddedBodyParsesInPlaceAsACopiedOne) {
  const Endpoint c = Endpoint::kCompletions;
  const std::string text = R"({"model":"m","n":2,"prompt":"one two three"})";
  std::string padded = text + R"(,"n":5,"prompt":"other"}   )" + std::string(80, '"');
  padded.resize(text.size());  // the capacity keeps the bytes above
  ASSERT_GE(padded.capacity() - padded.size(), 64u);
  const JsonBody in_place(padded);
  EXPECT_GE(in_place.slack, 64u);
  const auto a = parse_openai_request(c, in_place);
  const auto b = parse_openai_request(c, std::string_view(text));
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(a));
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(b));
  EXPECT_EQ(std::get<OpenAiRequest>(a).prompts, std::get<OpenAiRequest>(b).prompts);
  EXPECT_EQ(std::get<OpenAiRequest>(a).n, 2);
  // A body cut short with padding past it is refused as the same body without padding is.
  std::string cut = text;
  cut.reserve(cut.size() + 128);
  cut.resize(text.size() - 2);
  const auto refused = parse_openai_request(c, JsonBody(cut));
  const auto* e = std::get_if<ApiError>(&refused);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->message.find("invalid JSON in the body at byte"), 0u) << e->message;
  // The parser's reason, without the bytes it quotes: a lone surrogate says so.
  const ApiError lone = err(c, R"({"model":"m","prompt":"\ud800"})");
  EXPECT_NE(lone.message.find("surrogate"), std::string::npos) << lone.message;
  EXPECT_EQ(lone.message.find("last read"), std::string::npos) << lone.message;
}

TEST(OpenAiRequest, FastParseReadsWhatNlohmannReads) {
  const Endpoint c = Endpoint::kCompletions;
  std::string prompt;
  for (int i = 0; prompt.size() < 400000; ++i) {  // JSON text: escapes, UTF-8, a surrogate pair
    prompt += "line " + std::to_string(i) + R"(: \"quoted\" \\ tab\t \u00e9t\u00e9 \ud83d\ude00 )" +
              "caf\xc3\xa9" + R"(\n)";
  }
  const std::string body = R"({"model":"m","n":2,"n":3,"max_tokens":7,"temperature":1e-1,)"
                           R"("seed":18446744073709551615,"prompt":")" +
                           prompt + R"("})";
  const OpenAiRequest r = ok(c, body);
  ASSERT_EQ(r.prompts.size(), 1u);
  const auto want = nlohmann::json::parse(body);
  EXPECT_EQ(r.prompts[0], want["prompt"].get<std::string>());
  EXPECT_EQ(r.n, 3);  // the last of a repeated key
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.temperature.value_or(-1), 0.1f);
  EXPECT_EQ(r.seed, 18446744073709551615ull);
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","max_tokens":-3})").param, "max_tokens");
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","max_tokens":2.5})").param, "max_tokens");
  // Past 64 bits: simdjson refuses, nlohmann takes it as a double, the field check refuses that.
  EXPECT_EQ(err(c, R"({"model":"m","prompt":"x","max_tokens":123456789012345678901234})").param,
            "max_tokens");
  const ApiError utf8 = err(c, R"({"model":"m","prompt":"caf)"
                               "\xc3"
                               R"("})");
  EXPECT_NE(utf8.message.find("UTF-8"), std::string::npos) << utf8.message;
  const ApiError cut = err(c, body.substr(0, body.size() - 2));
  EXPECT_EQ(cut.message.find("invalid JSON in the body at byte"), 0u) << cut.message;
}

// kRouting: what a router in front of another engine needs, and nothing that engine judges.
TEST(OpenAiRequest, RoutingModeTakesWhatOtherEnginesAccept) {
  auto routing = [](Endpoint e, std::string_view body) {
    auto r = parse_openai_request(e, body, {}, {}, ParseMode::kRouting);
    EXPECT_TRUE(std::holds_alternative<OpenAiRequest>(r))
        << (std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).message : "");
    return std::holds_alternative<OpenAiRequest>(r) ? std::get<OpenAiRequest>(r) : OpenAiRequest{};
  };
  // Out-of-range sampling, a million tokens: refused in full mode only.
  const char* body =
      R"({"model":"llama","prompt":[128000,9906,1917],"logprobs":5,"temperature":7,"n":3,)"
      R"("stream":true,"cache_salt":"s","group":"g","max_tokens":1000000})";
  EXPECT_EQ(err(Endpoint::kCompletions, body).param, "max_tokens");
  const OpenAiRequest r = routing(Endpoint::kCompletions, body);
  EXPECT_EQ(r.model, "llama");
  EXPECT_EQ(r.prompts.front(), std::string("\x00\xf4\x01\x00\xb2\x26\x00\x00\x7d\x07\x00\x00", 12));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.cache_salt, "s");
  EXPECT_EQ(r.group, "g");
  // Byte-sized ids give the full mode's bytes.
  EXPECT_EQ(routing(Endpoint::kCompletions, R"({"model":"m","prompt":[104,105]})").prompts.front(),
            "hi");
  // Chat with an image part: each message's JSON, so the next turn extends this one.
  const std::string turn1 =
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})";
  const std::string turn2 =
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]},)"
      R"({"role":"assistant","content":"a cat"},{"role":"user","content":"why?"}]})";
  err(Endpoint::kChatCompletions, turn1);
  const std::string p1 = routing(Endpoint::kChatCompletions, turn1).prompts.front();
  const std::string p2 = routing(Endpoint::kChatCompletions, turn2).prompts.front();
  EXPECT_EQ(p2.substr(0, p1.size()), p1);
  // A body the full mode accepts renders alike in both modes.
  const char* chat = R"({"model":"m","messages":[{"role":"user","content":"hello"}]})";
  EXPECT_EQ(routing(Endpoint::kChatCompletions, chat).prompts,
            ok(Endpoint::kChatCompletions, chat).prompts);
  // Still refused: no model, no prompt, not JSON.
  for (const char* bad :
       {R"({"prompt":"x"})", R"({"model":"m"})", "{", R"({"model":"m","prompt":[-1]})"}) {
    EXPECT_TRUE(std::holds_alternative<ApiError>(
        parse_openai_request(Endpoint::kCompletions, bad, {}, {}, ParseMode::kRouting)))
        << bad;
  }
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// A chat request's tools and chat_template_kwargs reach the model's template as apply_chat_template
// passes them (keys in the client's order); without a template, tools are refused, not dropped.
TEST(OpenAiRequest, ToolsAndTemplateKwargsReachTheModelsTemplate) {
  auto tmpl = ChatTemplate::compile(
      "{% if tools %}TOOLS {% for t in tools %}{{ t | tojson }}{% endfor %}\n{% endif %}"
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
      "{% if enable_thinking is defined and not enable_thinking %}NO-THINK{% endif %}",
      "", "");
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  const auto shared = std::make_shared<const ChatTemplate>(std::move(*tmpl));
  const ChatTemplateFor template_for = [&](const std::string&) { return shared; };
  auto parse = [&](std::string_view body, ParseMode mode = ParseMode::kFull,
                   const ChatTemplateFor& t = {}) {
    return parse_openai_request(Endpoint::kChatCompletions, body, ApiLimits{}, t ? t : template_for,
                                mode);
  };
  const std::string_view body = R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
      "chat_template_kwargs": {"enable_thinking": false}})";
  auto r = parse(body);
  ASSERT_TRUE(std::holds_alternative<OpenAiRequest>(r)) << std::get<ApiError>(r).message;
  EXPECT_EQ(std::get<OpenAiRequest>(r).prompts[0],
            // (trim_blocks: the newline after a block tag is dropped)
            "TOOLS {\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}"
            "user: hi\nNO-THINK");

  auto param_of = [&](std::string_view b, ParseMode mode = ParseMode::kFull,
                      const ChatTemplateFor& t = {}) {
    auto x = parse(b, mode, t);
    return std::holds_alternative<ApiError>(x) ? std::get<ApiError>(x).param : "(accepted)";
  };
  EXPECT_EQ(param_of(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                         "tools": {"name": "f"}})"),
            "tools");
  EXPECT_EQ(param_of(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                         "chat_template_kwargs": {"messages": []}})"),
            "chat_template_kwargs");
  EXPECT_EQ(param_of(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                         "chat_template_kwargs": [1]})"),
            "chat_template_kwargs");
  // No template: the canonical rendering cannot carry tools.
  const ChatTemplateFor none = [](const std::string&) { return nullptr; };
  EXPECT_EQ(param_of(body, ParseMode::kFull, none), "tools");
  EXPECT_EQ(param_of(body, ParseMode::kRouting, none), "(accepted)");
  // Completions have no tools.
  auto c = parse_openai_request(Endpoint::kCompletions,
                                R"({"model": "m", "prompt": "x", "tools": [{}]})", ApiLimits{});
  ASSERT_TRUE(std::holds_alternative<ApiError>(c));
  EXPECT_EQ(std::get<ApiError>(c).param, "tools");
}

}  // namespace
}  // namespace kvc
