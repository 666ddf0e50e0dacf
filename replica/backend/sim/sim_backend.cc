#include "replica/backend/sim/sim_backend.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace kvc {
namespace {

// Llama-3-8B on the H200, fitted by bench/fit_sim_model.py to 142 warm steps measured by
// `kvcascade bench engine --step-table` (decode rows 0-128 x prefill chunks 0-4,096 tokens at
// 1,024- and 3,072-token contexts, and after 2,048 cached tokens) and its cascade rollouts at
// 1-128 rows (bench/results/sim-h200-validation.md): RMS error 3.5%, worst 10.6% (the first,
// constant-overhead model: 14.2%, 37%). Streaming read 4,550 GB/s (the mean of those runs);
// GEMMs at 650 TFLOP/s (82% of cuBLASLt's 790 at 8192^3); prefill attention at 343 TFLOP/s;
// 1.69 ms per step + 7.6 us per decode row, +0.27 ms for a step with prefill chunks, +0.59 ms
// more when it also decodes, +1.11 ms when a chunk starts after cached tokens.
constexpr double kH200ReadBandwidth = 4.55e12;
constexpr double kH200GemmRate = 650e12;
constexpr double kH200AttentionRate = 343e12;
constexpr double kH200StepOverhead = 1.69e-3;
constexpr double kH200DecodeRowOverhead = 7.6e-6;
constexpr double kH200PrefillStepOverhead = 0.27e-3;
constexpr double kH200MixedStepOverhead = 0.59e-3;
constexpr double kH200CachedPrefillOverhead = 1.11e-3;
constexpr double kH200Memory = 141e9;
constexpr double kH100Memory = 80e9;
// Host memory <-> GPU over PCIe 5.0 x16 (H100, H200) and 4.0 x16 (A10G): what pinned copies
// reach, about 85% of the link's 64 and 32 GB/s. Not measured here.
constexpr double kPcie5Copy = 55e9;
constexpr double kPcie4Copy = 25e9;
// About an A10G (a slow GPU for routing evaluation): 600 GB/s and 125 TFLOP/s as the rates reached,
// prefill attention at the H200's share of its GEMM rate, the H200's step overheads (launches and
// host work do not scale with the GPU), 24 GB. Not measured.
constexpr double kA10gReadBandwidth = 600e9;
constexpr double kA10gGemmRate = 125e12;
constexpr double kA10gMemory = 24e9;
// A CPU replica's proportions (for routing evaluation where prefill is most of the work):
// compute-bound rows, so a prefill token or
// a decode row costs about what a quarter of the weights' read does (peak / bandwidth = 4 tokens,
// against 143 on the H200), and a small fixed cost per step (the tiny CPU replicas measured
// here fit about none). Prefill 0.09 ms per token, a weight read 0.4 ms: faster than any CPU, so
// that fleet traces replay in minutes; the ratios, not the speed, are what routing sees.
constexpr double kCpuReadBandwidth = 40e12;
constexpr double kCpuGemmRate = 160e12;
constexpr double kCpuStepOverhead = 0.1e-3;
constexpr double kCpuDecodeRowOverhead = 1e-6;
constexpr double kCpuMemory = 256e9;

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Result<SimPreset> sim_preset(std::string_view name) {
  SimPreset p;
  p.name = std::string(name);
  Result<ModelConfig> model = preset_config("llama3-8b");
  assert(model.ok());
  p.model = *model;
  Hardware& hw = p.hardware;
  // The H100 has the H200's SMs and clocks (the same compute rates and overheads) and less,
  // slower memory: not measured here, the seed's bandwidth. The A10G takes the H200's
  // overheads with its own rates.
  const bool h200 = name == "h200-llama3-8b", a10g = name == "a10g-llama3-8b";
  if (h200 || a10g || name == "h100-llama3-8b") {
    hw.bandwidth_bytes_per_s = h200 ? kH200ReadBandwidth : a10g ? kA10gReadBandwidth : 3.35e12;
    hw.peak_flops = a10g ? kA10gGemmRate : kH200GemmRate;
    hw.attention_flops_per_s = kH200AttentionRate * hw.peak_flops / kH200GemmRate;
    hw.step_overhead_s = kH200StepOverhead;
    hw.decode_row_overhead_s = kH200DecodeRowOverhead;
    hw.prefill_step_overhead_s = kH200PrefillStepOverhead;
    hw.mixed_step_overhead_s = kH200MixedStepOverhead;
    hw.cached_prefill_overhead_s = kH200CachedPrefillOverhead;
    p.memory_bytes = h200 ? kH200Memory : a10g ? kA10gMemory : kH100Memory;
    hw.host_link_bytes_per_s = a10g ? kPcie4Copy : kPcie5Copy;
  } else if (name == "cpu-llama3-8b") {
    hw.bandwidth_bytes_per_s = kCpuReadBandwidth;
    hw.peak_flops = kCpuGemmRate;
    hw.attention_flops_per_s = kCpuGemmRate;
    hw.step_overhead_s = kCpuStepOverhead;
    hw.decode_row_overhead_s = kCpuDecodeRowOverhead;
    hw.host_link_bytes_per_s = kCpuReadBandwidth / 2;  // a copy in memory: read and write
    p.memory_bytes = kCpuMemory;
  } else {
    std::string known;
    for (const std::string& n : sim_preset_names())
      known += (known.empty() ? "" : ", ") + n;
    return Error{"unknown sim preset '" + std::string(name) + "' (known: " + known + ")"};
  }
  return p;
}

std::vector<std::string> sim_preset_names() {
  return {"h200-llama3-8b", "h100-llama3-8b", "a10g-llama3-8b", "cpu-llama3-8b"};
}

int32_t sim_kv_blocks(const SimPreset& p, double utilization, int32_t block_size) {
  const double weights =
      static_cast<double>(p.model.num_parameters()) * p.hardware.weight_bytes_per_element;
  const double block_bytes =
      static_cast<double>(p.model.kv_bytes_per_token(p.hardware.kv_bytes_per_element) * block_size);
  const double blocks = std::floor((p.memory_bytes * utilization - weights) / block_bytes);
  return static_cast<int32_t>(std::clamp(blocks, 1.0, double{1 << 24}));
}

int32_t sim_host_blocks(const SimPreset& p, double gigabytes, int32_t block_size) {
  return host_tier_blocks(
      gigabytes, static_cast<double>(p.model.kv_bytes_per_token(p.hardware.kv_bytes_per_element)) *
                     block_size);
}

namespace {

// FLOPs of one query row against one key: QK^T and PV over every layer and query head.
double attention_flops_per_key(const ModelConfig& model) {
  return 4.0 * model.num_hidden_layers * model.num_attention_heads * model.head_dim;
}

}  // namespace

StepWork prefill_chunk_work(const ModelConfig& model, int64_t start, int64_t len, bool logits,
                            int kv_bytes_per_element) {
  StepWork w;
  w.rows = len;
  w.logit_rows = logits ? 1 : 0;
  w.kv_bytes_read = (start + len) * model.kv_bytes_per_token(kv_bytes_per_element);
  // Causal: the token at position q attends to q + 1 keys.
  w.attention_flops =
      attention_flops_per_key(model) * static_cast<double>(len * start + len * (len + 1) / 2);
  w.prefill_attention_flops = w.attention_flops;
  w.cached_start_chunks = start > 0 ? 1 : 0;
  return w;
}

int64_t decode_context_bytes(const ModelConfig& model, std::span<const int64_t> decode_contexts,
                             int kv_bytes_per_element) {
  int64_t tokens = 0;
  for (const int64_t c : decode_contexts)
    tokens += c;
  return tokens * model.kv_bytes_per_token(kv_bytes_per_element);
}

StepWork synthetic_step_work(const ModelConfig& model, int64_t start, int64_t chunk,
                             std::span<const int64_t> decode_contexts, int kv_bytes_per_element) {
  StepWork w =
      chunk > 0 ? prefill_chunk_work(model, start, chunk, true, kv_bytes_per_element) : StepWork{};
  const auto rows = static_cast<int64_t>(decode_contexts.size());
  w.rows += rows;
  w.decode_rows = rows;
  w.logit_rows += rows;
  w.kv_bytes_read += decode_context_bytes(model, decode_contexts, kv_bytes_per_element);
  for (const int64_t c : decode_contexts)
    w.attention_flops += attention_flops_per_key(model) * static_cast<double>(c);
  return w;
}

StepWork step_work_of(const ForwardBatch& batch, const ModelConfig& model, int32_t block_size,
                      int kv_bytes_per_element) {
  StepWork w;
  const int64_t kv_per_token = model.kv_bytes_per_token(kv_bytes_per_element);
  const double flops_per_key = attention_flops_per_key(model);
  const PrefillBatch& p = batch.prefill;
  for (int32_t c = 0; c < p.num_chunks(); ++c) {
    const StepWork chunk = prefill_chunk_work(model, p.start_pos[c], p.chunk_tokens(c),
                                              p.want_logits[c] != 0, kv_bytes_per_element);
    w.rows += chunk.rows;
    w.logit_rows += chunk.logit_rows;
    w.kv_bytes_read += chunk.kv_bytes_read;
    w.attention_flops += chunk.attention_flops;
    w.prefill_attention_flops += chunk.prefill_attention_flops;
    w.cached_start_chunks += chunk.cached_start_chunks;
  }
  const DecodeBatch& d = batch.decode;
  w.rows += d.size();
  w.decode_rows = d.size();
  w.logit_rows += d.size();
  const kernels::CascadePlan& plan = d.plan;
  if (d.size() > 0) {
    for (int n = 0; n < plan.num_nodes(); ++n) {
      const int64_t tokens =
          int64_t{plan.node_block_indptr[n + 1] - plan.node_block_indptr[n]} * block_size;
      const int64_t members = plan.node_seq_indptr[n + 1] - plan.node_seq_indptr[n];
      w.kv_bytes_read += tokens * kv_per_token;  // once per node: the cascade's saving
      w.attention_flops += flops_per_key * static_cast<double>(tokens * members);
    }
    for (int32_t len : plan.suffix_len) {
      w.kv_bytes_read += int64_t{len} * kv_per_token;
      w.attention_flops += flops_per_key * len;
    }
  }
  const auto copies =
      std::count_if(batch.kv_moves.begin(), batch.kv_moves.end(),
                    [](const KvTransfer& t) { return t.kind == KvTransfer::Kind::kCopy; });
  w.kv_bytes_copied = 2 * static_cast<int64_t>(copies) * block_size * kv_per_token;
  const auto over_link = static_cast<int64_t>(batch.kv_moves.size()) - copies;
  w.kv_bytes_host_transferred = over_link * block_size * kv_per_token;
  return w;
}

int32_t sim_token(uint64_t seed, int32_t sibling, int32_t position) {
  const uint64_t h =
      mix(mix(mix(seed) ^ static_cast<uint32_t>(sibling)) ^ static_cast<uint32_t>(position));
  const int32_t k = static_cast<int32_t>(h % 27);
  return k == 26 ? ' ' : 'a' + k;
}

SimBackend::SimBackend(SimPreset preset, int32_t num_blocks, int32_t block_size, Clock& clock,
                       int32_t num_host_blocks)
    : preset_(std::move(preset)),
      num_blocks_(num_blocks),
      block_size_(block_size),
      clock_(clock),
      num_host_blocks_(num_host_blocks) {
  assert(num_blocks > 0 && block_size > 0 && num_host_blocks >= 0);
  assert(preset_.model.validate().ok());
}

Clock::Duration SimBackend::predict(const ForwardBatch& batch) const {
  const StepWork w = step_work_of(batch, preset_.model, block_size_, kv_bytes_per_element());
  const double s = step_seconds(preset_.model, w, preset_.hardware);
  return std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double>(s));
}

std::vector<PredictedStep> SimBackend::predicted_steps() const {
  const int kv_element = kv_bytes_per_element();
  std::vector<PredictedStep> steps;
  for (const int64_t context : {128, 512, 2048}) {
    for (const int64_t prefill : {0, 32, 64, 128, 256, 512}) {
      for (const size_t rows : {0, 1, 2, 4, 8, 16, 32}) {
        if (prefill == 0 && rows == 0) continue;
        const std::vector<int64_t> contexts(rows, context);
        // The chunk starts after `context` cached tokens but at the shortest context.
        const StepWork w = synthetic_step_work(preset_.model, context == 128 ? 0 : context, prefill,
                                               contexts, kv_element);
        steps.push_back(
            {step_seconds(preset_.model, w, preset_.hardware), static_cast<double>(prefill),
             static_cast<double>(rows),
             static_cast<double>(decode_context_bytes(preset_.model, contexts, kv_element)) *
                 1e-9});
      }
    }
  }
  return steps;
}

Status SimBackend::forward(const ForwardBatch& batch, ForwardOutput& out) {
  const Clock::TimePoint start = clock_.now();
  const Clock::Duration took = predict(batch);
  out.samples.resize(batch.samples.size());
  // A uniform draw over the 27 symbols: the logprob every sim token reports.
  const float logprob = -std::log(27.0f);
  for (size_t i = 0; i < batch.samples.size(); ++i) {
    const SampleRequest& r = batch.samples[i];
    SampledToken& t = out.samples[i];
    t = {sim_token(r.seed, r.sibling, r.position), logprob, {}};
    // Every symbol is as likely: the top entries are the first symbols in id order (' ', a...).
    const int k = kernels::sampling::top_logprobs(r.params());
    for (int j = 0; j < k && j < 27; ++j)
      t.top.push_back(TokenLogprob{j == 0 ? ' ' : 'a' + j - 1, logprob});
  }
  if (batch.return_logits) {
    out.logits.assign(static_cast<size_t>(batch.num_logit_rows()) * preset_.model.vocab_size, 0.0f);
  } else {
    out.logits.clear();
  }
  busy_ns_ += took.count();
  ++num_forwards_;
  clock_.sleep_until(start + took);
  return Status::Ok();
}

}  // namespace kvc
