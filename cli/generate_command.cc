// `kvcascade generate`: run the replica engine in-process on one or more prompts (each a sibling
// group of n samples) and print the outputs and per-step stats.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "replica/core/engine.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc::cli {
namespace {

struct GenerateFlags {
  EngineFlags engine;
  std::vector<std::string> prompts;
  std::string prompt_file;
  int32_t n = 1;
  SamplingParams sampling;
  bool json = false;
  bool quiet = false;
  bool logits = false;
};

std::string describe_levels(const CascadeStats& c) {
  std::string s;
  for (const LevelDecision& d : c.decisions) {
    if (!s.empty()) s += ", ";
    s += "L" + std::to_string(d.level) + " " + std::to_string(d.shared_tokens) + " tok x " +
         std::to_string(d.members) + " " + (d.kept ? "kept" : "flat") + " (" +
         cascade_reason_name(d.reason) + ")";
  }
  return s.empty() ? "none" : s;
}

nlohmann::json step_json(int64_t index, const StepStats& s) {
  nlohmann::json levels = nlohmann::json::array();
  for (const LevelDecision& d : s.cascade.decisions) {
    levels.push_back({{"level", d.level},
                      {"shared_prefix_tokens", d.shared_tokens},
                      {"siblings", d.members},
                      {"kept", d.kept},
                      {"reason", cascade_reason_name(d.reason)},
                      {"bytes_saved", d.bytes_saved}});
  }
  return {{"step", index},
          {"seconds", std::chrono::duration<double>(s.duration).count()},
          {"decode_batch_size", s.num_decode_seqs},
          {"prefill_tokens", s.num_prefill_tokens},
          {"block_copies", s.num_block_copies},
          {"cascade_levels", levels},
          {"kv_bytes_flat", s.cascade.kv_bytes_flat},
          {"kv_bytes_read", s.cascade.kv_bytes_cascade},
          {"preempted_groups", s.preempted.size()},
          {"prefix_cache_query_tokens", s.prefix_cache_query_tokens},
          {"prefix_cache_hit_tokens", s.prefix_cache_hit_tokens}};
}

int run_generate(GenerateFlags f, CudaBackendMaker cuda) {
  if (!f.prompt_file.empty()) {
    std::ifstream in(f.prompt_file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "kvcascade generate: cannot read %s\n", f.prompt_file.c_str());
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    f.prompts.push_back(text.str());
  }
  if (f.prompts.empty()) {
    std::fprintf(stderr, "kvcascade generate: give --prompt TEXT or --prompt-file F\n");
    return 2;
  }
  if (f.logits && !f.json) {
    std::fprintf(stderr, "kvcascade generate: --logits goes with --json\n");
    return 2;
  }
  auto tokenizer = make_tokenizer(f.engine.backend);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "kvcascade generate: %s\n", tokenizer.error().message.c_str());
    return 2;
  }
  auto backend = make_backend(backend_options(f.engine), **tokenizer, cuda);
  if (!backend.ok()) {
    std::fprintf(stderr, "kvcascade generate: %s\n", backend.error().message.c_str());
    return 2;
  }
  if (std::string note = generation_config_note((*backend)->config()); !note.empty()) {
    std::fprintf(stderr, "kvcascade generate: note: %s\n", note.c_str());
  }
  Engine engine(**backend, **tokenizer, engine_config(f.engine, **backend),
                SteadyClock::instance());
  std::map<uint64_t, size_t> prompt_of;
  std::map<uint64_t, size_t> prompt_len;
  // --logits: each choice's logits rows, row i the distribution its token i was drawn from.
  std::map<std::pair<size_t, int32_t>, std::vector<std::vector<float>>> logits_rows;
  if (f.logits) {
    engine.set_logits_observer([&](uint64_t g, int32_t s, int32_t pos, std::span<const float> l) {
      auto& rows = logits_rows[{prompt_of.at(g), s}];
      const size_t i = static_cast<size_t>(pos) - prompt_len.at(g);
      if (rows.size() <= i) rows.resize(i + 1);
      rows[i].assign(l.begin(), l.end());  // a recomputed token (preemption) overwrites
    });
  }
  for (size_t i = 0; i < f.prompts.size(); ++i) {
    GenerationRequest req;
    req.prompt = (*tokenizer)
                     ->encode((*tokenizer)->completion_prefix() + f.prompts[i] +
                              (*tokenizer)->completion_suffix());
    req.n = f.n;
    req.params = f.sampling;
    const size_t len = req.prompt.size();
    auto id = engine.submit(std::move(req));
    if (!id.ok()) {
      std::fprintf(stderr, "kvcascade generate: prompt %zu: %s\n", i, id.error().message.c_str());
      return 2;
    }
    prompt_of[*id] = i;
    prompt_len[*id] = len;
  }

  struct Choice {
    std::string text;
    std::string finish;
    std::vector<int32_t> token_ids;  // generated, as the model drew them
  };
  std::vector<std::vector<int32_t>> prompt_ids(f.prompts.size());
  std::map<std::pair<size_t, int32_t>, Choice> choices;
  nlohmann::json steps = nlohmann::json::array();
  int64_t step_index = 0, preemptions = 0, hit = 0, query = 0, kv_flat = 0, kv_read = 0;
  double seconds = 0;
  while (engine.has_work()) {
    StepResult r = engine.step();
    const StepStats& s = r.stats;
    for (const SequenceOutput& o : r.outputs) {
      Choice& c = choices[{prompt_of.at(o.group_id), o.sibling}];
      c.text += o.text_delta;
      if (o.finish != FinishReason::kNone) c.finish = finish_reason_name(o.finish);
    }
    for (const auto& g : r.finished) {
      const size_t p = prompt_of.at(g->id);
      prompt_ids[p] = g->prompt;
      for (const Sequence& seq : g->seqs) {
        choices[{p, seq.sibling}].token_ids.assign(
            seq.tokens.begin() + static_cast<int64_t>(g->prompt.size()), seq.tokens.end());
      }
    }
    preemptions += static_cast<int64_t>(s.preempted.size());
    hit += s.prefix_cache_hit_tokens;
    query += s.prefix_cache_query_tokens;
    kv_flat += s.cascade.kv_bytes_flat;
    kv_read += s.cascade.kv_bytes_cascade;
    seconds += std::chrono::duration<double>(s.duration).count();
    if (f.json) {
      steps.push_back(step_json(step_index, s));
    } else if (!f.quiet) {
      std::printf("step %3lld  %6.1f ms  decode %3d  prefill %4d  levels: %s%s%s\n",
                  static_cast<long long>(step_index),
                  std::chrono::duration<double, std::milli>(s.duration).count(), s.num_decode_seqs,
                  s.num_prefill_tokens, describe_levels(s.cascade).c_str(),
                  s.preempted.empty() ? "" : "  PREEMPTED",
                  s.prefix_cache_query_tokens
                      ? ("  prefix-cache hit " + std::to_string(s.prefix_cache_hit_tokens) + "/" +
                         std::to_string(s.prefix_cache_query_tokens))
                            .c_str()
                      : "");
    }
    ++step_index;
  }

  if (f.json) {
    nlohmann::json out;
    out["choices"] = nlohmann::json::array();
    for (const auto& [key, c] : choices) {
      out["choices"].push_back({{"prompt_index", key.first},
                                {"index", key.second},
                                {"text", c.text},
                                {"token_ids", c.token_ids},
                                {"finish_reason", c.finish}});
      if (f.logits) out["choices"].back()["logits"] = logits_rows[key];
    }
    out["prompt_token_ids"] = prompt_ids;
    out["stats"] = {{"steps", steps},
                    {"num_steps", step_index},
                    {"seconds", seconds},
                    {"attention", f.engine.attention},
                    {"preemptions", preemptions},
                    {"prefix_cache_query_tokens", query},
                    {"prefix_cache_hit_tokens", hit},
                    {"kv_bytes_flat", kv_flat},
                    {"kv_bytes_read", kv_read}};
    // Generated bytes need not be valid UTF-8: replace what is not, rather than fail.
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf(
      "\n%lld steps, %.2f s, %lld preemptions, prefix-cache hit %lld/%lld tokens, "
      "KV read %.1f MiB (flat would read %.1f MiB)\n",
      static_cast<long long>(step_index), seconds, static_cast<long long>(preemptions),
      static_cast<long long>(hit), static_cast<long long>(query), kv_read / 1048576.0,
      kv_flat / 1048576.0);
  for (const auto& [key, c] : choices) {
    std::printf("--- prompt %zu, sample %d (%s)\n%s\n", key.first, key.second, c.finish.c_str(),
                nlohmann::json(c.text)
                    .dump(-1, ' ', true, nlohmann::json::error_handler_t::replace)
                    .c_str());
  }
  return 0;
}

}  // namespace

Run add_generate_command(CLI::App& app, const CudaEntry& cuda) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "run the engine on prompts and print the outputs");
  add_engine_flags(*cmd, f->engine);
  cmd->add_option("--prompt", f->prompts, "prompt text (repeat for several sibling groups)");
  cmd->add_option("--prompt-file", f->prompt_file, "read one more prompt from a file")
      ->check(CLI::ExistingFile);
  cmd->add_option("-n", f->n, "samples per prompt (one sibling group)")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-tokens", f->sampling.max_tokens, "tokens to generate per sample")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--temperature", f->sampling.temperature, "0 = greedy")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", f->sampling.top_k, "0 = off")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--top-p", f->sampling.top_p, "1 = off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", f->sampling.seed, "sampling seed (same seed, same output)");
  cmd->add_option("--stop", f->sampling.stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", f->sampling.ignore_eos, "generate max-tokens even past EOS");
  cmd->add_flag("--json", f->json,
                "print one JSON object {choices (with token_ids), prompt_token_ids, stats}");
  cmd->add_flag("--quiet", f->quiet, "no per-step lines");
  cmd->add_flag("--logits", f->logits,
                "with --json: every choice's logits, one row of the whole vocabulary per generated "
                "token (for accuracy checks: bench/hf_parity.py)");
  return [f, maker = cuda.backend] { return run_generate(*f, maker); };
}

}  // namespace kvc::cli
