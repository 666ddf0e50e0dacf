// kvcascade: one binary, several commands (router, replica, generate, plan, bench, demo, loadgen,
// tokenize).
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"kvcascade: prefix-aware routing and cascade decode for shared-prefix LLM serving"};
  app.require_subcommand(1);
  std::map<std::string, kvc::cli::Run> runs;
  runs["plan"] = kvc::cli::add_plan_command(app);
  runs["demo"] = kvc::cli::add_demo_command(app);
  runs["generate"] = kvc::cli::add_generate_command(app);
#if KVCASCADE_HAVE_BENCH
  runs["bench"] = kvc::cli::add_bench_command(app);  // bench/bench_command.cc
#endif
  runs["replica"] = kvc::cli::add_replica_command(app);
  runs["router"] = kvc::cli::add_router_command(app);
  runs["loadgen"] = kvc::cli::add_loadgen_command(app);
  runs["tokenize"] = kvc::cli::add_tokenize_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (CLI::App* sub : app.get_subcommands())
    return runs.at(sub->get_name())();
  return 2;
}
