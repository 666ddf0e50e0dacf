// The Hugging Face tokenizer (replica/tokenizer/hf_tokenizer.h). The first input byte picks the
// case: odd: the input is a tokenizer.json, which must load or be refused with an error (never
// crash); even: the rest is text for a small byte-level tokenizer with added tokens, which must
// encode any bytes (invalid UTF-8 included) to ids whose bytes give the text back, with or without
// literal spans.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "replica/tokenizer/hf_tokenizer.h"

namespace {

// Byte-level BPE over the 256 byte symbols (GPT-2 alphabet), a few merges, two added tokens.
std::string small_tokenizer_json() {
  std::string vocab;
  int id = 0;
  auto add = [&](const std::string& piece) {
    if (id > 0) vocab += ",";
    vocab += "\"" + piece + "\": " + std::to_string(id);
    ++id;
  };
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    static int next = 256;
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      if (cp == '"' || cp == '\\') s += '\\';
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    add(s);
  }
  add("th");
  add("the");
  add("\\u0120the");
  return R"({"added_tokens": [{"id": 300, "content": "<|end|>", "special": true},
                              {"id": 301, "content": "<|e", "special": false}],
             "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex":
                 "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                 "behavior": "Isolated"},
               {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
             "model": {"type": "BPE", "vocab": {)" +
         vocab + R"(}, "merges": ["t h", "th e", "\u0120 the"]}})";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    auto t = kvc::HfTokenizer::from_json(rest);
    if (t.ok()) (void)(*t)->encode("the text <|end|> \xff");
    return 0;
  }
  static const auto tok = [] {
    auto t = kvc::HfTokenizer::from_json(small_tokenizer_json());
    if (!t.ok()) std::fprintf(stderr, "small tokenizer: %s\n", t.error().message.c_str());
    FUZZ_CHECK(t.ok());
    return std::move(*t);
  }();
  std::vector<kvc::TextSpan> literal;
  if (rest.size() > 2) literal.push_back({rest.size() / 3, rest.size() / 3 * 2});
  for (const auto& spans : {std::vector<kvc::TextSpan>{}, literal}) {
    std::string back;
    for (int32_t id : tok->encode(rest, spans)) {
      FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
      back += tok->token_bytes(id);
    }
    FUZZ_CHECK(back == rest);
  }
  return 0;
}
