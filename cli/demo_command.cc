// `kvcascade demo` (what `make demo` runs).
//
// Today it shows the two foundations the serving stack stands on, with real code paths:
//  1. the seed's worked example through the bandwidth model (`kvcascade plan`);
//  2. prefix routing on the shared block-hash core: chat turns rendered to bytes, hashed into
//     chained blocks, looked up in the radix index of two replicas, including a near-miss prompt
//     whose system prompt carries a timestamp.
// The router + CPU replicas demo replaces part 2 once the servers exist (issues 3, 5, 6).
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "prefix_index/block_hash.h"
#include "prefix_index/chat_render.h"
#include "prefix_index/radix_index.h"
#include "replica/bandwidth_model.h"
#include "replica/engine.h"
#include "replica/tokenizer.h"

namespace kvc::cli {
namespace {

struct DemoFlags {
  size_t block_size = kDefaultBlockSize;
};

std::string system_prompt(const std::string& date) {
  std::string s = "You are a careful assistant for the finance team. Today is " + date + ". ";
  for (int i = 0; i < 24; ++i)
    s += "Policy " + std::to_string(i) + ": cite sources; be precise. ";
  return s;
}

nlohmann::json conversation(const std::string& date, int turns) {
  nlohmann::json m = nlohmann::json::array();
  m.push_back({{"role", "system"}, {"content", system_prompt(date)}});
  for (int t = 0; t < turns; ++t) {
    m.push_back({{"role", "user"}, {"content", "Question " + std::to_string(t) + " about Q3?"}});
    if (t + 1 < turns)
      m.push_back({{"role", "assistant"}, {"content", "Answer " + std::to_string(t)}});
  }
  return m;
}

// Part 3: the replica engine in-process (tiny random-weight model on the CPU backend): two
// documents behind one system prompt, 8 samples each, decoded with a two-level cascade.
int run_engine_part(const DemoFlags& f) {
  std::cout << "\n== 3. the replica engine: 2 prompts x 8 samples sharing a system prompt "
               "(tiny model, CPU)\n";
  EngineFlags ef;
  ef.kv_blocks = 1024;
  ef.block_size = static_cast<int32_t>(f.block_size);
  auto backend = make_backend(ef);
  if (!backend.ok()) {
    std::fprintf(stderr, "demo: %s\n", backend.error().message.c_str());
    return 1;
  }
  ByteTokenizer tokenizer;
  Engine engine(**backend, tokenizer, engine_config(ef, **backend), SteadyClock::instance());
  const std::string system = system_prompt("2026-11-29");
  for (const char* doc : {"Document: quarterly revenue rose 4%.", "Document: costs fell 2%."}) {
    GenerationRequest r;
    r.prompt = tokenizer.encode(system + doc + " Summarise.");
    r.n = 8;
    r.params.max_tokens = 16;
    r.params.temperature = 0.8f;
    r.params.seed = 7;
    r.params.ignore_eos = true;
    if (auto id = engine.submit(std::move(r)); !id.ok()) {
      std::fprintf(stderr, "demo: %s\n", id.error().message.c_str());
      return 1;
    }
  }
  int64_t steps = 0, kv_read = 0, kv_flat = 0;
  std::string levels;
  int32_t most_levels = 0;
  while (engine.has_work()) {
    const StepResult r = engine.step();
    kv_read += r.stats.cascade.kv_bytes_cascade;
    kv_flat += r.stats.cascade.kv_bytes_flat;
    if (r.stats.cascade.num_levels_kept() > most_levels) {
      most_levels = r.stats.cascade.num_levels_kept();
      levels.clear();
      for (const LevelDecision& d : r.stats.cascade.decisions) {
        if (!d.kept) continue;
        levels += "    level " + std::to_string(d.level) + ": " + std::to_string(d.shared_tokens) +
                  " shared tokens x " + std::to_string(d.members) + " sequences\n";
      }
    }
    ++steps;
  }
  std::printf("  %lld steps; cascade levels of a decode step:\n%s", static_cast<long long>(steps),
              levels.c_str());
  std::printf("  KV read over the run: %.1f MiB with cascade, %.1f MiB flat (%.1fx less)\n",
              kv_read / 1048576.0, kv_flat / 1048576.0,
              kv_read > 0 ? static_cast<double>(kv_flat) / kv_read : 0.0);
  std::cout << "\nNext: router + CPU replicas serving these requests (see README.md, Status).\n";
  return 0;
}

int run_demo(const DemoFlags& f) {
  std::cout << "== 1. the seed's worked example: 2 prompts x 64 rollouts, 4096-token prefix, "
               "1024-token completions, Llama-3-8B shape\n";
  const ModelConfig model = *preset_config("llama3-8b");
  const DecodeWorkload work{2, 64, 4096, 1024};
  std::cout << format_report(model, work, Hardware{}, plan_decode_step(model, work, Hardware{}));

  std::cout << "\n== 2. prefix routing on chained block hashes (block " << f.block_size
            << " bytes)\n";
  const BlockHash seed = chain_seed("tiny");
  RadixIndex index(SteadyClock::instance());
  const char* names[] = {"replica-0", "replica-1"};
  auto route = [&](const char* label, const nlohmann::json& messages, ReplicaId fallback) {
    const Result<std::string> prompt = render_chat(messages);
    const auto hashes = hash_blocks(seed, prompt.value(), f.block_size);
    const MatchResult m = index.match(hashes);
    ReplicaId chosen = fallback;
    size_t best = 0;
    for (const ReplicaMatch& rm : m.replicas) {
      if (rm.blocks > best) best = rm.blocks, chosen = rm.replica;
    }
    std::printf("  %-34s %5zu bytes %4zu blocks -> %s (cached %zu blocks = %zu bytes)%s\n", label,
                prompt->size(), hashes.size(), names[chosen], best, best * f.block_size,
                m.near_miss() ? "  [near miss: diverges early inside a known prefix]" : "");
    (void)index.insert(chosen, hashes);  // the replica now holds the prompt's blocks
  };
  route("alice turn 1", conversation("2026-11-29", 1), 0);
  route("alice turn 2 (extends turn 1)", conversation("2026-11-29", 2), 1);
  route("alice turn 3", conversation("2026-11-29", 3), 1);
  nlohmann::json other = conversation("2026-11-29", 1);
  other[1]["content"] = "A different first question";
  route("bob, same system prompt", other, 1);
  route("carol, timestamp in system prompt", conversation("2026-11-30", 1), 1);
  std::printf("  index: %zu blocks in %zu nodes, %zu bytes\n", index.num_blocks(),
              index.num_nodes(), index.memory_bytes());
  return run_engine_part(f);
}

}  // namespace

Run add_demo_command(CLI::App& app) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand("demo", "run the built-in demonstration");
  cmd->add_option("--block-size", flags->block_size, "bytes per hashed block")
      ->check(CLI::Range(1, 4096));
  return [flags] { return run_demo(*flags); };
}

}  // namespace kvc::cli
