// The engine's host work per step, without a model: the seed's rollout (2 prompts x 64 siblings,
// 4,096-token prefix, 1,024 tokens each) on a backend that draws tokens without computing
// anything. What remains is scheduling, cascade planning, building the ForwardBatch and
// appending tokens: the time a GPU waits between steps unless it is overlapped (keep it
// under ~5% of a ~8-12 ms step). Prints the median per-step time at S = 16, 256, 1024.
// Prints the split of each (schedule, build the batch, check it, the rest) as well: the backend
// runs check_forward_batch each step, as the CPU and CUDA backends do.
//   bench_engine_host [groups siblings prefix gen [same]]   (same: siblings draw equal tokens,
//   as greedy decoding does; else each its own)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "replica/core/engine.h"

namespace kvc {
namespace {

class NullBackend final : public Backend {
 public:
  NullBackend(ModelConfig c, int32_t blocks, bool same)
      : config_(std::move(c)), blocks_(blocks), same_(same) {}
  const ModelConfig& config() const override { return config_; }
  int32_t num_blocks() const override { return blocks_; }
  int32_t block_size() const override { return 16; }
  std::string name() const override { return "null"; }
  int32_t kv_bytes_per_element() const override { return 2; }
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override {
    const auto t0 = std::chrono::steady_clock::now();
    Status checked = check_forward_batch(batch, blocks_, block_size(), config_.vocab_size);
    check_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!checked.ok()) return checked;
    out.samples.resize(batch.samples.size());
    for (size_t k = 0; k < batch.samples.size(); ++k)
      out.samples[k] = {
          'a' + (batch.samples[k].position + (same_ ? 0 : batch.samples[k].sibling)) % 26,
          0.0f,
          {}};
    out.logits.clear();
    return Status::Ok();
  }
  // The last forward's check_forward_batch; reset_check() before a step that may not call it.
  double check_ms() const { return check_ms_; }
  void reset_check() { check_ms_ = 0; }

 private:
  ModelConfig config_;
  int32_t blocks_;
  bool same_;  // every sibling draws the same tokens (greedy decoding of one prompt)
  double check_ms_ = 0;
};

}  // namespace
}  // namespace kvc

int main(int argc, char** argv) {
  using namespace kvc;
  const int groups = argc > 1 ? std::atoi(argv[1]) : 2;
  const int siblings = argc > 2 ? std::atoi(argv[2]) : 64;
  const int prefix = argc > 3 ? std::atoi(argv[3]) : 4096;
  const int gen = argc > 4 ? std::atoi(argv[4]) : 1024;
  const bool same = argc > 5 && std::string_view(argv[5]) == "same";
  ModelConfig c = *preset_config("llama3-8b");
  const int32_t blocks = groups * (prefix / 16 + 1 + siblings * ((prefix + gen) / 16 + 2)) + 64;
  NullBackend backend(c, blocks, same);
  ByteTokenizer tokenizer;
  EngineConfig config;
  config.scheduler.max_num_seqs = 256;
  config.scheduler.max_tokens_per_step = 4096;
  config.scheduler.max_model_len = c.max_position_embeddings;
  Engine engine(backend, tokenizer, config, SteadyClock::instance());
  for (int g = 0; g < groups; ++g) {
    GenerationRequest r;
    r.prompt.assign(prefix, 'a' + g);
    for (int i = 0; i < prefix; i += 7)
      r.prompt[i] = 'a' + (i * 31 + g) % 26;
    r.n = siblings;
    r.params.temperature = 0;
    r.params.max_tokens = gen;
    r.params.ignore_eos = true;
    if (!engine.submit(r).ok()) return 1;
  }
  struct Step {
    int s;
    double ms, schedule_ms, build_ms, check_ms;
  };
  std::vector<Step> steps;
  int s = 0;
  while (engine.has_work()) {
    backend.reset_check();  // a step without work does not call forward
    const auto t0 = std::chrono::steady_clock::now();
    StepResult r = engine.step();
    if (!r.error.empty()) {
      std::fprintf(stderr, "step failed: %s\n", r.error.c_str());
      return 1;
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto in_ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    if (r.stats.num_prefill_tokens == 0) {
      steps.push_back({s, ms, in_ms(r.stats.schedule), in_ms(r.stats.build), backend.check_ms()});
    }
    for (const auto& o : r.outputs)
      if (o.group_id == 1 && o.sibling == 0) s += o.num_new_tokens;
  }
  std::printf("host work per step, %d x %d, prefix %d%s:\n", groups, siblings, prefix,
              same ? ", siblings drawing equal tokens" : "");
  for (int point : {16, 256, 1024}) {
    std::vector<double> v, sched, build, check;
    for (const Step& st : steps) {
      if (st.s < point - 10 || st.s >= point + 10 || st.s >= gen) continue;
      v.push_back(st.ms);
      sched.push_back(st.schedule_ms);
      build.push_back(st.build_ms);
      check.push_back(st.check_ms);
    }
    if (v.empty()) continue;
    auto median = [](std::vector<double>& x) {
      std::sort(x.begin(), x.end());
      return x[x.size() / 2];
    };
    const size_t n = v.size();
    std::printf(
        "  S=%-5d %.3f ms (median of %zu steps; schedule %.3f, build the batch %.3f, "
        "check it %.3f)\n",
        point, median(v), n, median(sched), median(build), median(check));
  }
  return 0;
}
