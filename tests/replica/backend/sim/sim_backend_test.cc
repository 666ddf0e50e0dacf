// The sim backend: predicted step times against the H200 measurements in bench/results, the
// fake clock moved instead of sleeping, deterministic tokens, and the real engine around it.
#include "replica/backend/sim/sim_backend.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "replica/core/engine.h"
#include "replica/tokenizer/tokenizer.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using namespace std::chrono_literals;

SimPreset h200() {
  return *sim_preset("h200-llama3-8b");
}

double ms(Clock::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// The seed's rollout decode step: 2 prompts x 64 siblings, 4,096-token prefix, S private tokens
// each, as a cascade plan (one shared node per prompt) or flat (the prefix in every suffix).
ForwardBatch rollout_step(int32_t suffix, bool cascade) {
  constexpr int32_t kBlock = 16, kPrefixBlocks = 4096 / kBlock, kGroups = 2, kSiblings = 64;
  ForwardBatch b;
  kernels::CascadePlan& plan = b.decode.plan;
  int32_t next_block = 0;
  std::vector<std::vector<int32_t>> prefix(kGroups);
  for (auto& p : prefix) {
    for (int32_t i = 0; i < kPrefixBlocks; ++i)
      p.push_back(next_block++);
  }
  if (cascade) {
    for (int32_t g = 0; g < kGroups; ++g) {
      std::vector<int32_t> members;
      for (int32_t s = 0; s < kSiblings; ++s)
        members.push_back(g * kSiblings + s);
      plan.add_node(prefix[g], members);
    }
  }
  for (int32_t g = 0; g < kGroups; ++g) {
    for (int32_t s = 0; s < kSiblings; ++s) {
      std::vector<int32_t> blocks = cascade ? std::vector<int32_t>{} : prefix[g];
      for (int32_t i = 0; i < (suffix + kBlock - 1) / kBlock; ++i)
        blocks.push_back(next_block++);
      plan.add_suffix(blocks, suffix + (cascade ? 0 : 4096));
      b.decode.tokens.push_back('a');
      b.decode.positions.push_back(4096 + suffix - 1);
      b.decode.slots.push_back(blocks.back() * kBlock);
      b.samples.push_back({b.decode.size() - 1, s, 4096 + suffix - 1});
    }
  }
  return b;
}

struct Measured {
  int32_t suffix;
  double floor_ms, step_ms;  // bench/results/engine-h200.md, cascade with CUDA graphs
};

// The rollout's steps (engine-h200.md, one run): the cascade decode steps, flat decode (which
// the model overestimates: the H200 serves 64 siblings' re-reads of one prefix from its L2,
// which bytes / bandwidth cannot see; replicas run cascade), and one 4,096-token prefill.
TEST(SimBackend, PredictsTheMeasuredH200EngineSteps) {
  testing::FakeClock clock;
  SimBackend sim(h200(), 1 << 16, 16, clock);
  const Measured cascade[] = {{16, 3.640, 6.450}, {256, 4.537, 7.579}, {1024, 7.370, 10.365}};
  std::printf("| workload | floor here | floor measured | predicted | measured | error |\n");
  for (const Measured& m : cascade) {
    const ForwardBatch b = rollout_step(m.suffix, true);
    const StepWork w = step_work_of(b, sim.config(), 16, 2);
    const double floor = step_floor_seconds(sim.config(), w, sim.preset().hardware) * 1e3;
    const double predicted = ms(sim.predict(b));
    std::printf("| cascade decode S=%d | %.3f | %.3f | %.3f ms | %.3f ms | %+.1f%% |\n", m.suffix,
                floor, m.floor_ms, predicted, m.step_ms, 100 * (predicted / m.step_ms - 1));
    // The same bytes as the benchmark, at that run's measured bandwidth.
    Hardware run = sim.preset().hardware;
    run.bandwidth_bytes_per_s = 4.488e12;
    EXPECT_NEAR(step_floor_seconds(sim.config(), w, run) * 1e3, m.floor_ms, 0.01 * m.floor_ms);
    EXPECT_NEAR(predicted, m.step_ms, 0.08 * m.step_ms);
  }
  const Measured flat[] = {{16, 18.711, 14.289}, {1024, 22.442, 18.118}};
  for (const Measured& m : flat) {
    const double predicted = ms(sim.predict(rollout_step(m.suffix, false)));
    std::printf("| flat decode S=%d | | %.3f | %.3f ms | %.3f ms | %+.1f%% |\n", m.suffix,
                m.floor_ms, predicted, m.step_ms, 100 * (predicted / m.step_ms - 1));
    EXPECT_GT(predicted, m.step_ms);
    EXPECT_LT(predicted, 1.6 * m.step_ms);
  }
  ForwardBatch prefill;
  PrefillChunk chunk;
  chunk.tokens.assign(4096, 'a');
  for (int32_t i = 0; i < 4096 / 16; ++i)
    chunk.block_table.push_back(i);
  chunk.want_logits = true;
  prefill.prefill.add(chunk);
  const double predicted = ms(sim.predict(prefill));
  std::printf("| prefill 4096 tokens | | 79.100 | %.3f ms | 98.7-108.8 ms | |\n", predicted);
  EXPECT_GT(predicted, 95.0);
  EXPECT_LT(predicted, 110.0);
}

// A step of `decode` requests with `context` tokens each (private KV, no shared prefix) and a
// `prefill`-token chunk after `cached` cached tokens: the shapes of `kvcascade bench engine
// --step-table`.
ForwardBatch serving_step(int32_t decode, int32_t context, int32_t prefill, int32_t cached) {
  constexpr int32_t kBlock = 16;
  ForwardBatch b;
  int32_t next_block = 0;
  for (int32_t i = 0; i < decode; ++i) {
    std::vector<int32_t> blocks;
    for (int32_t k = 0; k < (context + kBlock - 1) / kBlock; ++k)
      blocks.push_back(next_block++);
    b.decode.plan.add_suffix(blocks, context);
    b.decode.tokens.push_back('a');
    b.decode.positions.push_back(context - 1);
    b.decode.slots.push_back(blocks.back() * kBlock);
    b.samples.push_back({b.decode.size() - 1, 0, context - 1});
  }
  if (prefill > 0) {
    PrefillChunk chunk;
    chunk.tokens.assign(prefill, 'a');
    chunk.start_pos = cached;
    for (int32_t k = 0; k < (cached + prefill + kBlock - 1) / kBlock; ++k)
      chunk.block_table.push_back(next_block++);
    chunk.want_logits = true;
    b.prefill.add(chunk);
  }
  return b;
}

// Every warm step of the committed step tables (126: decode rows 0-128 x prefill chunks of
// 0-4,096 tokens at 1,024- and 3,072-token contexts, and after 2,048 cached tokens;
// bench/results/sim-h200-validation.md): each within 12%, RMS within 5%. The model's constants
// were fitted to these and the rollouts' steps (bench/fit_sim_model.py): this guards the model
// and its constants against changes, it does not validate them out of sample.
TEST(SimBackend, PredictsTheMeasuredH200StepTable) {
  testing::FakeClock clock;
  SimBackend sim(h200(), 1 << 16, 16, clock);
  double sum_sq = 0;
  int cells = 0;
  for (const char* file : {"step-table-ctx1024.json", "step-table-ctx3072.json",
                           "step-table-ctx1024-cached2048.json"}) {
    const std::string path =
        std::string(KVC_SOURCE_DIR) + "/bench/results/runs/2026-12-02-step-table/" + file;
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const nlohmann::json doc = nlohmann::json::parse(in);
    const int32_t cached = doc["step_table"]["cached_prefix"].get<int32_t>();
    std::printf("%s: decode rows | prefill tokens | measured ms | predicted ms | error\n", file);
    for (const auto& row : doc["step_table"]["rows"]) {
      const int32_t decode = row["decode"].get<int32_t>(), prefill = row["prefill"].get<int32_t>();
      // The decoding requests' mean prompt + tokens so far at the timed steps.
      const auto context =
          static_cast<int32_t>(std::lround(row["decode_context_mean"].get<double>()));
      const double measured = row["step_ms"].get<double>();
      const double predicted = ms(sim.predict(serving_step(decode, context, prefill, cached)));
      const double error = predicted / measured - 1;
      std::printf("| %d | %d | %.2f | %.2f | %+.1f%% |\n", decode, prefill, measured, predicted,
                  100 * error);
      EXPECT_LT(std::abs(error), 0.12)
          << file << ": " << decode << " decoding + " << prefill << " prefill: " << predicted
          << " ms predicted, " << measured << " measured";
      sum_sq += error * error;
      ++cells;
    }
  }
  EXPECT_EQ(cells, 126);  // 42 shapes per table
  const double rms = std::sqrt(sum_sq / cells);
  std::printf("step tables: %d steps, RMS error %.1f%%\n", cells, 100 * rms);
  EXPECT_LT(rms, 0.05);
}

TEST(SimBackend, ForwardWaitsOnTheClockAndDrawsDeterministicTokens) {
  testing::FakeClock clock;
  SimBackend sim(h200(), 1 << 16, 16, clock);
  ForwardBatch b = rollout_step(16, true);
  const Clock::TimePoint start = clock.now();
  ForwardOutput out;
  ASSERT_TRUE(sim.forward(b, out).ok());
  EXPECT_EQ(clock.now() - start, sim.predict(b));  // moved, not slept
  EXPECT_EQ(sim.busy(), sim.predict(b));
  ASSERT_EQ(out.samples.size(), b.samples.size());
  for (size_t i = 0; i < b.samples.size(); ++i) {
    const SampleRequest& r = b.samples[i];
    EXPECT_EQ(out.samples[i].token, sim_token(r.seed, r.sibling, r.position));
    const int32_t t = out.samples[i].token;
    EXPECT_TRUE((t >= 'a' && t <= 'z') || t == ' ');
  }
  EXPECT_NE(sim_token(1, 0, 5), sim_token(1, 0, 6) + 100);  // a function, not a constant
  EXPECT_EQ(sim_token(7, 3, 11), sim_token(7, 3, 11));
  ForwardOutput empty;
  const Clock::TimePoint before = clock.now();
  ASSERT_TRUE(sim.forward(ForwardBatch{}, empty).ok());
  EXPECT_EQ(clock.now(), before);  // no work, no time
}

TEST(SimBackend, PresetsAndPoolSize) {
  EXPECT_FALSE(sim_preset("a100-llama").ok());
  const SimPreset p = h200();
  // 0.9 x 141 GB - 16.06 GB of weights at 128 KiB of KV per token: ~53,000 blocks of 16.
  const int32_t blocks = sim_kv_blocks(p, 0.9, 16);
  EXPECT_GT(blocks, 50000);
  EXPECT_LT(blocks, 56000);
  EXPECT_EQ(sim_kv_blocks(p, 0.05, 16), 1);  // the weights alone do not fit: clamped
}

// The profiles for routing evaluation on other hardware: a slow GPU, whose decode step is its
// weights' read at 600 GB/s, and a CPU replica's proportions, where a 2,048-token prefill costs
// what about 500 weight reads do (the H200: about 15) and a lone decode row is nearly free. Their
// pools: 24 GB leaves the A10G a few thousand blocks; the CPU profile's memory holds more than the
// H200's.
TEST(SimBackend, RoutingProfiles) {
  const Result<SimPreset> a10g = sim_preset("a10g-llama3-8b"), cpu = sim_preset("cpu-llama3-8b");
  ASSERT_TRUE(a10g.ok() && cpu.ok());
  EXPECT_EQ(sim_preset_names().size(), 4u);
  Result<SimPreset> unknown = sim_preset("a100-llama");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("cpu-llama3-8b"), std::string::npos);  // names known
  testing::FakeClock clock;
  auto step = [&](const SimPreset& p, int32_t prefill_tokens) {
    SimBackend sim(p, 4096, 16, clock);
    ForwardBatch b;
    if (prefill_tokens > 0) {
      PrefillChunk chunk;
      chunk.tokens.assign(prefill_tokens, 'a');
      for (int32_t i = 0; i < prefill_tokens / 16; ++i)
        chunk.block_table.push_back(i);
      b.prefill.add(chunk);
    } else {
      b.decode.plan.add_suffix({0}, 8);
      b.decode.tokens.push_back('a');
      b.decode.positions.push_back(7);
      b.decode.slots.push_back(7);
    }
    return ms(sim.predict(b));
  };
  // A10G: the 15 GB of layer weights at 600 GB/s = 25 ms, plus the H200's 1.7 ms per step.
  EXPECT_NEAR(step(*a10g, 0), 26.7, 1.0);
  const double cpu_decode = step(*cpu, 0), cpu_prefill = step(*cpu, 2048);
  EXPECT_LT(cpu_decode, 1.0);                   // 0.4 ms of weights + 0.1 ms
  EXPECT_NEAR(cpu_prefill, 2048 * 0.09, 15.0);  // 15 GFLOP per token at 160 TFLOP/s
  EXPECT_GT(cpu_prefill / cpu_decode, 200.0);   // prefill is the work
  EXPECT_LT(step(h200(), 2048) / step(h200(), 0), 20.0);
  EXPECT_LT(sim_kv_blocks(*a10g, 0.9, 16), 3000);
  EXPECT_GT(sim_kv_blocks(*cpu, 0.9, 16), sim_kv_blocks(h200(), 0.9, 16));
}

// The host tier's transfers cost their bytes over the host link: an A10G loading a 512-token
// prompt (32 blocks of 16 at 128 KiB a token, 67 MB) over PCIe 4.0's 25 GB/s takes 2.7 ms, about
// 1/22 of computing it (60 ms); the slots 32 GB of host memory give.
TEST(SimBackend, HostTierTransfersCostTheirBytesOverTheHostLink) {
  const Result<SimPreset> a10g = sim_preset("a10g-llama3-8b");
  ASSERT_TRUE(a10g.ok());
  EXPECT_EQ(a10g->hardware.host_link_bytes_per_s, 25e9);
  EXPECT_EQ(h200().hardware.host_link_bytes_per_s, 55e9);
  const int32_t slots = sim_host_blocks(*a10g, 32, 16);
  EXPECT_EQ(slots, static_cast<int32_t>(32e9 / (131072.0 * 16)));
  testing::FakeClock clock;
  SimBackend sim(*a10g, 4096, 16, clock, slots);
  EXPECT_EQ(sim.num_host_blocks(), slots);
  ForwardBatch loads;
  for (int32_t i = 0; i < 32; ++i)
    loads.kv_moves.push_back(KvTransfer{KvTransfer::Kind::kLoad, i, i});
  const double with_loads = ms(sim.predict(loads));
  const double transfer_ms = 32.0 * 16 * 131072 / 25e9 * 1e3;
  EXPECT_NEAR(with_loads - a10g->hardware.step_overhead_s * 1e3, transfer_ms, 1e-6);
  ForwardBatch prefill;
  PrefillChunk chunk;
  chunk.tokens.assign(512, 'a');
  for (int32_t i = 0; i < 32; ++i)
    chunk.block_table.push_back(i);
  prefill.prefill.add(chunk);
  EXPECT_GT(ms(sim.predict(prefill)), 20 * transfer_ms);
}

TEST(SimBackend, EngineRunsARequestOnSimulatedTime) {
  testing::FakeClock clock;
  SimBackend sim(h200(), 4096, 16, clock);
  ByteTokenizer tokenizer;
  EngineConfig config;
  config.scheduler.max_model_len = 8192;
  Engine engine(sim, tokenizer, config, clock);
  GenerationRequest req;
  req.prompt.assign(1000, 'x');
  req.n = 4;
  req.params.max_tokens = 20;
  req.params.seed = 9;
  ASSERT_TRUE(engine.submit(req).ok());
  const Clock::TimePoint start = clock.now();
  std::vector<std::string> text(4);
  int steps = 0;
  while (engine.has_work() && steps < 1000) {
    StepResult r = engine.step();
    ASSERT_TRUE(r.error.empty()) << r.error;
    for (const SequenceOutput& o : r.outputs)
      text[o.sibling] += o.text_delta;
    ++steps;
  }
  // 2 prefill steps (512-token budget) + 19 decode steps after the first token.
  EXPECT_EQ(steps, 21);
  EXPECT_EQ(clock.now() - start, sim.busy());
  EXPECT_GT(ms(sim.busy()), 21 * 4.5);   // 4 decodes per step: ~5 ms each
  EXPECT_LT(ms(sim.busy()), 21 * 20.0);  // the prefill steps cost more
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(text[s].size(), 20u);
    EXPECT_EQ(text[s][5], static_cast<char>(sim_token(9, s, 1000 + 5)));
  }
  EXPECT_NE(text[0], text[1]);
}

}  // namespace
}  // namespace kvc
