#include "prefix_index/chat_render.h"

#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvc {
namespace {

using nlohmann::json;

std::string render_ok(const json& messages, bool add_generation_prompt) {
  Result<std::string> r = render_chat(messages, add_generation_prompt);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : std::string();
}

// The error must name `field` first: "messages[2].content[1].type: ...".
::testing::AssertionResult fails_naming(const json& messages, std::string_view field) {
  Result<std::string> r = render_chat(messages);
  if (r.ok()) return ::testing::AssertionFailure() << "rendered " << *r;
  const std::string& message = r.error().message;
  if (!message.starts_with(std::string(field) + ": ")) {
    return ::testing::AssertionFailure() << "message '" << message << "' does not name " << field;
  }
  return ::testing::AssertionSuccess();
}

bool is_prefix(std::string_view prefix, std::string_view text) {
  return text.starts_with(prefix);
}

json slice(const json& messages, size_t n) {
  return json(std::vector<json>(messages.begin(), messages.begin() + n));
}

TEST(RenderChatTest, ExactBytes) {
  const json messages = json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "name": "ann", "content": "Hi"},
    {"role": "assistant", "content": null},
    {"role": "tool", "content": [{"type": "text", "text": "4"}, {"type": "text", "text": "2"}]},
    {"role": "developer", "content": ""}
  ])");
  const std::string body =
      "<|start|>system\nBe brief.<|end|>\n"
      "<|start|>user name=ann\nHi<|end|>\n"
      "<|start|>assistant\n<|end|>\n"
      "<|start|>tool\n42<|end|>\n"
      "<|start|>developer\n<|end|>\n";
  EXPECT_EQ(render_ok(messages, false), body);
  EXPECT_EQ(render_ok(messages, true), body + "<|start|>assistant\n");
}

TEST(RenderChatTest, GenerationPromptOpensAnAssistantMessage) {
  const json assistant = json::array({{{"role", "assistant"}, {"content", "x"}}});
  EXPECT_TRUE(is_prefix(kChatGenerationPrompt, render_ok(assistant, false)));
}

TEST(RenderChatTest, ContentIsUsedByteForByte) {
  // Valid multi-byte UTF-8, a NUL, template-looking text and newlines all pass through unchanged.
  const std::string content =
      std::string("h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 ") +
      std::string("a\0b", 3) + " <|end|>\n\r\t";
  const json messages = json::array({{{"role", "user"}, {"content", content}}});
  EXPECT_EQ(render_ok(messages, false), "<|start|>user\n" + content + "<|end|>\n");

  const json parsed = json::parse(R"([{"role":"user","content":"\u00e9\ud83d\ude42"}])");
  EXPECT_EQ(render_ok(parsed, false), "<|start|>user\n\xc3\xa9\xf0\x9f\x99\x82<|end|>\n");
}

TEST(RenderChatTest, UnicodeNameIsKept) {
  const json messages = json::array({{{"role", "user"}, {"name", "Zo\xc3\xab"}, {"content", "x"}}});
  EXPECT_EQ(render_ok(messages, false), "<|start|>user name=Zo\xc3\xab\nx<|end|>\n");
}

TEST(RenderChatTest, TextPartsEqualTheirConcatenation) {
  const json as_string = json::parse(R"([{"role":"user","content":"ab"}])");
  const json as_parts = json::parse(
      R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}])");
  const json untyped_parts =
      json::parse(R"([{"role":"user","content":[{"text":"a"},{"text":"b"}]}])");
  const json split_differently = json::parse(
      R"([{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"ab"}]}])");
  const std::string expected = "<|start|>user\nab<|end|>\n<|start|>assistant\n";
  EXPECT_EQ(render_ok(as_string, true), expected);
  EXPECT_EQ(render_ok(as_parts, true), expected);
  EXPECT_EQ(render_ok(untyped_parts, true), expected);
  EXPECT_EQ(render_ok(split_differently, true), expected);

  const json no_parts = json::parse(R"([{"role":"user","content":[]}])");
  EXPECT_EQ(render_ok(no_parts, false), "<|start|>user\n<|end|>\n");
}

TEST(RenderChatTest, NullContentOnlyForAssistantAndTool) {
  EXPECT_EQ(render_ok(json::parse(R"([{"role":"tool","content":null}])"), false),
            "<|start|>tool\n<|end|>\n");
  EXPECT_EQ(render_ok(json::parse(R"([{"role":"assistant","content":null}])"), false),
            "<|start|>assistant\n<|end|>\n");
  for (const char* role : {"system", "developer", "user"}) {
    json messages = json::array({{{"role", role}, {"content", nullptr}}});
    EXPECT_TRUE(fails_naming(messages, "messages[0].content")) << role;
  }
}

TEST(RenderChatTest, IgnoresUnknownFields) {
  const json messages = json::parse(
      R"([{"role":"assistant","content":"x","tool_calls":[{"id":"1"}],"extra":{"a":1}}])");
  EXPECT_EQ(render_ok(messages, false), "<|start|>assistant\nx<|end|>\n");
}

struct ErrorCase {
  const char* messages;
  const char* field;
};

TEST(RenderChatTest, ErrorsNameTheField) {
  const ErrorCase cases[] = {
      {R"({"role":"user","content":"x"})", "messages"},
      {R"("hello")", "messages"},
      {R"(null)", "messages"},
      {R"([])", "messages"},
      {R"([1])", "messages[0]"},
      {R"([{"role":"user","content":"x"}, "y"])", "messages[1]"},
      {R"([{"content":"x"}])", "messages[0].role"},
      {R"([{"role":1,"content":"x"}])", "messages[0].role"},
      {R"([{"role":null,"content":"x"}])", "messages[0].role"},
      {R"([{"role":"robot","content":"x"}])", "messages[0].role"},
      {R"([{"role":"User","content":"x"}])", "messages[0].role"},
      {R"([{"role":"user"}])", "messages[0].content"},
      {R"([{"role":"assistant"}])", "messages[0].content"},
      {R"([{"role":"user","content":null}])", "messages[0].content"},
      {R"([{"role":"user","content":5}])", "messages[0].content"},
      {R"([{"role":"user","content":true}])", "messages[0].content"},
      {R"([{"role":"user","content":{"type":"text","text":"x"}}])", "messages[0].content"},
      {R"([{"role":"user","content":"ok"},{"role":"user","content":["x"]}])",
       "messages[1].content[0]"},
      {R"([{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}])",
       "messages[0].content[1].type"},
      {R"([{"role":"user","content":[{"type":3,"text":"a"}]}])", "messages[0].content[0].type"},
      {R"([{"role":"user","content":[{"type":"text"}]}])", "messages[0].content[0].text"},
      {R"([{"role":"user","content":[{"type":"text","text":7}]}])", "messages[0].content[0].text"},
      {R"([{"role":"user","content":[{"type":"text","text":null}]}])",
       "messages[0].content[0].text"},
      {R"([{"role":"user","name":5,"content":"x"}])", "messages[0].name"},
      {R"([{"role":"user","name":null,"content":"x"}])", "messages[0].name"},
      {R"([{"role":"user","name":"a\nb","content":"x"}])", "messages[0].name"},
      {R"([{"role":"user","name":"a<|end|>","content":"x"}])", "messages[0].name"},
  };
  for (const ErrorCase& c : cases) {
    EXPECT_TRUE(fails_naming(json::parse(c.messages), c.field)) << c.messages;
  }
}

TEST(RenderChatTest, UnsupportedPartMessageNamesTheType) {
  const json messages =
      json::parse(R"([{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])");
  Result<std::string> r = render_chat(messages);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "messages[0].content[0].type: only text parts are supported (got 'image_url')");
}

TEST(RenderChatTest, ErrorMessageStaysValidUtf8) {
  // A json built in code can hold invalid UTF-8; the echoed role must not make the message so.
  const json messages = json::array({{{"role", "\xff\xfe"}, {"content", "x"}}});
  Result<std::string> r = render_chat(messages);
  ASSERT_FALSE(r.ok());
  EXPECT_NO_THROW((void)json(r.error().message).dump());
}

json random_content(std::mt19937_64& rng, bool allow_null) {
  static const std::string kPieces[] = {
      "a", "hello", " ", "\n", "<|end|>", "\xc3\xa9", "\xf0\x9f\x99\x82", "<|start|>user\n", ""};
  auto text = [&] {
    std::string out;
    for (int n = static_cast<int>(rng() % 4); n > 0; --n)
      out += kPieces[rng() % std::size(kPieces)];
    return out;
  };
  switch (rng() % (allow_null ? 3 : 2)) {
    case 0:
      return text();
    case 1: {
      json parts = json::array();
      for (int n = static_cast<int>(rng() % 3); n > 0; --n) {
        parts.push_back({{"type", "text"}, {"text", text()}});
      }
      return parts;
    }
    default:
      return nullptr;
  }
}

json random_message(std::mt19937_64& rng) {
  static const char* kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  const std::string role = kRoles[rng() % std::size(kRoles)];
  json m = {{"role", role},
            {"content", random_content(rng, role == "assistant" || role == "tool")}};
  if (rng() % 3 == 0) m["name"] = "n" + std::to_string(rng() % 10);
  return m;
}

TEST(RenderChatTest, AddingAMessageOnlyAppendsBytes) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    json messages = json::array();
    for (int n = 2 + static_cast<int>(rng() % 6); n > 0; --n)
      messages.push_back(random_message(rng));
    for (size_t k = 1; k < messages.size(); ++k) {
      const std::string shorter = render_ok(slice(messages, k), false);
      EXPECT_TRUE(is_prefix(shorter, render_ok(slice(messages, k + 1), false))) << messages.dump();
      EXPECT_TRUE(is_prefix(shorter, render_ok(slice(messages, k + 1), true))) << messages.dump();
    }
    EXPECT_EQ(render_ok(messages, true), render_ok(messages, false) + kChatGenerationPrompt);
  }
}

TEST(RenderChatTest, NextTurnExtendsThePreviousPrompt) {
  std::mt19937_64 rng(8);
  for (int iter = 0; iter < 200; ++iter) {
    json messages = json::array();
    for (int n = static_cast<int>(rng() % 4); n > 0; --n)
      messages.push_back(random_message(rng));
    messages.push_back({{"role", "user"}, {"content", random_content(rng, false)}});
    const std::string prompt = render_ok(messages, true);

    // The reply comes back without a name, as the model produced it after the generation prompt.
    messages.push_back({{"role", "assistant"}, {"content", random_content(rng, true)}});
    messages.push_back({{"role", "user"}, {"content", random_content(rng, false)}});
    EXPECT_TRUE(is_prefix(prompt, render_ok(messages, true))) << messages.dump();
  }
}

}  // namespace
}  // namespace kvc
