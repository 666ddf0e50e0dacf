// `kvcascade plan`: the seed's bandwidth arithmetic for a shared-prefix decode batch.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "replica/model/bandwidth_model.h"
#include "replica/model/model_config.h"

namespace kvc::cli {
namespace {

struct PlanFlags {
  std::string preset = "llama3-8b";
  DecodeWorkload work{2, 64, 4096, 1024};
  Hardware hw;
  bool json = false;
};

int run_plan(const PlanFlags& f) {
  auto model = preset_config(f.preset);
  if (!model.ok()) {
    std::fprintf(stderr, "kvcascade plan: %s\n", model.error().message.c_str());
    return 2;
  }
  const StepReport r = plan_decode_step(*model, f.work, f.hw);
  if (f.json) {
    std::cout << to_json(*model, f.work, f.hw, r).dump(2) << "\n";
  } else {
    std::cout << format_report(*model, f.work, f.hw, r);
  }
  return 0;
}

}  // namespace

Run add_plan_command(CLI::App& app) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "bytes and predicted time of one decode step, flat vs cascade (the seed's arithmetic)");
  cmd->add_option("--preset", flags->preset, "model shape")->check(CLI::IsMember(preset_names()));
  cmd->add_option("--prefix", flags->work.prefix_tokens, "shared prefix tokens per group")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  // At least 1: the mean over the generation runs over suffixes 1..--suffix.
  cmd->add_option("--suffix", flags->work.suffix_tokens, "private tokens per sequence (at least 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--groups", flags->work.groups, "sibling groups (distinct prompts)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--siblings", flags->work.siblings, "sequences per group")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--bandwidth", flags->hw.bandwidth_bytes_per_s, "HBM bytes per second")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-bytes", flags->hw.kv_bytes_per_element, "bytes per KV element")
      ->check(CLI::IsMember({1, 2, 4}));
  cmd->add_flag("--json", flags->json, "print one JSON object");
  return [flags] { return run_plan(*flags); };
}

}  // namespace kvc::cli
