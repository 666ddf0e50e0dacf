#include "replica/model/bandwidth_model.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace kvc {
namespace {

struct Bytes {
  int64_t flat_kv, cascade_kv;
};

Bytes step_kv_bytes(const DecodeWorkload& w, int64_t suffix, int64_t per_token) {
  const int64_t prefix = w.prefix_tokens * per_token;
  const int64_t suffix_bytes = w.batch() * suffix * per_token;
  return {w.batch() * prefix + suffix_bytes, w.groups * prefix + suffix_bytes};
}

double ms(int64_t bytes, double bandwidth) {
  return static_cast<double>(bytes) / bandwidth * 1e3;
}

std::string human_bytes(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= double(1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  } else if (b >= double(1 << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / double(1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024.0);
  }
  return buf;
}

}  // namespace

int64_t weight_bytes_read_per_step(const ModelConfig& model, const Hardware& hw) {
  const int64_t embedding = int64_t{model.vocab_size} * model.hidden_size;
  // Tied embeddings are read as the LM head; untied, the input table is only gathered from.
  const int64_t read =
      model.tie_word_embeddings ? model.num_parameters() : model.num_parameters() - embedding;
  return read * hw.weight_bytes_per_element;
}

namespace {

// FLOPs of the weight matrices over the step's rows (the LM head over its logit rows only).
double gemm_flops(const ModelConfig& model, const StepWork& work) {
  const int64_t lm_head = int64_t{model.vocab_size} * model.hidden_size;
  const int64_t embedding = model.tie_word_embeddings ? 0 : lm_head;
  const double body_params = static_cast<double>(model.num_parameters() - embedding - lm_head);
  return 2 * body_params * static_cast<double>(work.rows) +
         2 * static_cast<double>(lm_head) * static_cast<double>(work.logit_rows);
}

double weight_bytes(const ModelConfig& model, const StepWork& work, const Hardware& hw) {
  return static_cast<double>(work.rows > 0 ? weight_bytes_read_per_step(model, hw) : 0);
}

}  // namespace

double step_floor_seconds(const ModelConfig& model, const StepWork& work, const Hardware& hw) {
  if (work.empty()) return 0;
  const double flops = gemm_flops(model, work) + work.attention_flops;
  const double bytes = weight_bytes(model, work, hw) +
                       static_cast<double>(work.kv_bytes_read + work.kv_bytes_copied);
  return std::max(bytes / hw.bandwidth_bytes_per_s, flops / hw.peak_flops);
}

double step_seconds(const ModelConfig& model, const StepWork& work, const Hardware& hw) {
  if (work.empty()) return 0;
  const double bw = hw.bandwidth_bytes_per_s;
  const double gemms =
      std::max(weight_bytes(model, work, hw) / bw, gemm_flops(model, work) / hw.peak_flops);
  const double attention_rate =
      hw.attention_flops_per_s > 0 ? hw.attention_flops_per_s : hw.peak_flops;
  const double attention = static_cast<double>(work.kv_bytes_read + work.kv_bytes_copied) / bw +
                           work.prefill_attention_flops / attention_rate;
  const bool prefill = work.rows > work.decode_rows, decode = work.decode_rows > 0;
  const double overhead = hw.step_overhead_s +
                          hw.decode_row_overhead_s * static_cast<double>(work.decode_rows) +
                          (prefill ? hw.prefill_step_overhead_s : 0) +
                          (prefill && decode ? hw.mixed_step_overhead_s : 0) +
                          (work.cached_start_chunks > 0 ? hw.cached_prefill_overhead_s : 0);
  const double host =
      static_cast<double>(work.kv_bytes_host_transferred) / hw.host_link_bytes_per_s;
  return gemms + attention + overhead + host;
}

StepReport plan_decode_step(const ModelConfig& model, const DecodeWorkload& work,
                            const Hardware& hw) {
  StepReport r;
  const double bw = hw.bandwidth_bytes_per_s;
  r.kv_bytes_per_token = model.kv_bytes_per_token(hw.kv_bytes_per_element);
  r.prefix_bytes = work.prefix_tokens * r.kv_bytes_per_token;
  r.flat_prefix_bytes = work.batch() * r.prefix_bytes;
  r.cascade_prefix_bytes = work.groups * r.prefix_bytes;
  r.suffix_bytes = work.batch() * work.suffix_tokens * r.kv_bytes_per_token;
  r.weight_bytes = model.num_parameters() * hw.weight_bytes_per_element;
  r.flat_attention_ms = ms(r.flat_kv_bytes(), bw);
  r.cascade_attention_ms = ms(r.cascade_kv_bytes(), bw);
  r.weights_ms = ms(r.weight_bytes, bw);
  r.flat_step_ms = r.flat_attention_ms + r.weights_ms;
  r.cascade_step_ms = r.cascade_attention_ms + r.weights_ms;
  r.step_gain = r.flat_step_ms / r.cascade_step_ms;

  double flat_total = 0, cascade_total = 0;
  for (int64_t s = 1; s <= std::max<int64_t>(work.suffix_tokens, 1); ++s) {
    const Bytes b = step_kv_bytes(work, s, r.kv_bytes_per_token);
    flat_total += ms(b.flat_kv + r.weight_bytes, bw);
    cascade_total += ms(b.cascade_kv + r.weight_bytes, bw);
  }
  r.mean_gain_over_generation = flat_total / cascade_total;
  r.redundant_prefix_to_weights =
      static_cast<double>(r.flat_prefix_bytes - r.cascade_prefix_bytes) /
      static_cast<double>(r.weight_bytes);
  // "Comparable" read as at least a quarter of the weight traffic: below that, cascade can save
  // at most ~20% of the step and its extra launches and merges eat into that.
  r.prefix_term_comparable_to_weights = r.redundant_prefix_to_weights >= 0.25;
  return r;
}

nlohmann::json to_json(const ModelConfig& model, const DecodeWorkload& work, const Hardware& hw,
                       const StepReport& r) {
  return {
      {"model", model.name},
      {"workload",
       {{"groups", work.groups},
        {"siblings", work.siblings},
        {"batch", work.batch()},
        {"prefix_tokens", work.prefix_tokens},
        {"suffix_tokens", work.suffix_tokens}}},
      {"bandwidth_bytes_per_s", hw.bandwidth_bytes_per_s},
      {"kv_bytes_per_token", r.kv_bytes_per_token},
      {"prefix_bytes", r.prefix_bytes},
      {"flat",
       {{"prefix_bytes", r.flat_prefix_bytes},
        {"suffix_bytes", r.suffix_bytes},
        {"kv_bytes", r.flat_kv_bytes()},
        {"attention_ms", r.flat_attention_ms},
        {"step_ms", r.flat_step_ms}}},
      {"cascade",
       {{"prefix_bytes", r.cascade_prefix_bytes},
        {"suffix_bytes", r.suffix_bytes},
        {"kv_bytes", r.cascade_kv_bytes()},
        {"attention_ms", r.cascade_attention_ms},
        {"step_ms", r.cascade_step_ms}}},
      {"weight_bytes", r.weight_bytes},
      {"weights_ms", r.weights_ms},
      {"step_gain", r.step_gain},
      {"mean_gain_over_generation", r.mean_gain_over_generation},
      {"redundant_prefix_to_weights", r.redundant_prefix_to_weights},
      {"prefix_term_comparable_to_weights", r.prefix_term_comparable_to_weights},
  };
}

std::string format_report(const ModelConfig& model, const DecodeWorkload& work, const Hardware& hw,
                          const StepReport& r) {
  std::string out;
  char line[256];
  auto add = [&](const char* fmt, auto... args) {
    std::snprintf(line, sizeof line, fmt, args...);
    out += line;
  };
  add("model %s: KV %s per token (%d-byte elements), weights %.2f GB\n", model.name.c_str(),
      human_bytes(r.kv_bytes_per_token).c_str(), hw.kv_bytes_per_element,
      static_cast<double>(r.weight_bytes) / 1e9);
  add("batch %lld = %lld groups x %lld siblings; prefix %lld tokens (%s each), suffix %lld "
      "tokens\n",
      (long long)work.batch(), (long long)work.groups, (long long)work.siblings,
      (long long)work.prefix_tokens, human_bytes(r.prefix_bytes).c_str(),
      (long long)work.suffix_tokens);
  add("at %.2f TB/s per decode step:\n", hw.bandwidth_bytes_per_s / 1e12);
  add("  %-8s prefix %-11s suffix %-11s KV total %-11s attention %7.2f ms  step %7.2f ms\n", "flat",
      human_bytes(r.flat_prefix_bytes).c_str(), human_bytes(r.suffix_bytes).c_str(),
      human_bytes(r.flat_kv_bytes()).c_str(), r.flat_attention_ms, r.flat_step_ms);
  add("  %-8s prefix %-11s suffix %-11s KV total %-11s attention %7.2f ms  step %7.2f ms\n",
      "cascade", human_bytes(r.cascade_prefix_bytes).c_str(), human_bytes(r.suffix_bytes).c_str(),
      human_bytes(r.cascade_kv_bytes()).c_str(), r.cascade_attention_ms, r.cascade_step_ms);
  add("  weights %.2f ms per step\n", r.weights_ms);
  add("gain at this step %.2fx; mean over the generation (suffix 1..%lld) %.2fx\n", r.step_gain,
      (long long)work.suffix_tokens, r.mean_gain_over_generation);
  add("redundant prefix traffic is %.2fx the weight traffic: %s\n", r.redundant_prefix_to_weights,
      r.prefix_term_comparable_to_weights
          ? "the prefix term compares with the weights, cascade pays"
          : "the prefix term is small next to the weights, cascade will not pay much");
  return out;
}

}  // namespace kvc
