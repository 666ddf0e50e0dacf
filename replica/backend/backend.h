// What the engine asks of a backend: run the model over one mixed batch of prefill chunks and
// decode tokens against the paged KV cache, and return logits. The CPU backend implements it on
// kernels/cpu; the CUDA backend on kernels/cuda. The scheduler never sees a backend's memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kernels/cascade_plan.h"
#include "kernels/sampling_rule.h"
#include "replica/backend/sampler.h"
#include "replica/model/model_config.h"

namespace kvc {

// A run of one sequence's prompt (or of tokens being recomputed after preemption), as the engine
// describes it; PrefillBatch::add appends it to the batch's CSR arrays.
struct PrefillChunk {
  std::vector<int32_t> tokens;  // token ids at positions [start_pos, start_pos + tokens.size())
  int32_t start_pos = 0;
  // Blocks covering positions [0, start_pos + tokens.size()): position p lives in block
  // block_table[p / block_size] at slot p % block_size. KV of [0, start_pos) is already there.
  std::vector<int32_t> block_table;
  bool want_logits = false;  // logits of the chunk's last token (the prompt is complete)
};

// Every prefill chunk of a step in CSR form (the layout the device kernels take, copied as is):
// chunk c's tokens are tokens[token_indptr[c] .. token_indptr[c + 1]) at positions from
// start_pos[c]; its block table is block_indices[block_indptr[c] .. block_indptr[c + 1]).
struct PrefillBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> token_indptr{0};
  std::vector<int32_t> start_pos;
  std::vector<int32_t> block_indptr{0};
  std::vector<int32_t> block_indices;
  std::vector<uint8_t> want_logits;  // 1: the chunk's last token gives a row of logits

  void add(const PrefillChunk& chunk);
  int32_t num_chunks() const { return static_cast<int32_t>(start_pos.size()); }
  int32_t num_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t chunk_tokens(int32_t c) const { return token_indptr[c + 1] - token_indptr[c]; }
  const int32_t* chunk_blocks(int32_t c) const { return block_indices.data() + block_indptr[c]; }
  int32_t chunk_num_blocks(int32_t c) const { return block_indptr[c + 1] - block_indptr[c]; }
  bool empty() const { return start_pos.empty(); }
};

// One new token for each of a set of sequences.
struct DecodeBatch {
  std::vector<int32_t> tokens;     // the token fed to each sequence
  std::vector<int32_t> positions;  // its position
  std::vector<int32_t> slots;      // where its KV goes: block_id * block_size + offset
  // Attention of each sequence over its context including the new token's slot; flat or cascade.
  kernels::CascadePlan plan;
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

// One token to draw from a row of logits. Sampling is a pure function of (logits row, params,
// seed, sibling, position) on every backend (replica/backend/sampler.h), so a preempted sibling
// that recomputes draws the same tokens.
struct SampleRequest {
  int32_t logits_row = 0;  // row of the batch's logits (ForwardBatch::num_logit_rows order)
  int32_t sibling = 0;
  int32_t position = 0;  // the position of the token being drawn
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  // Logprobs to report besides the token's own: the top_logprobs (0-20) most likely tokens;
  // processed: of the distribution the token is drawn from (after temperature, top-k, top-p),
  // not of the raw logits (kernels/sampling_rule.h LogprobNorm).
  int32_t top_logprobs = 0;
  bool processed_logprobs = false;

  // The row's parameters as both samplers take them.
  kernels::sampling::SampleParams params() const;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct SampledToken {
  int32_t token = 0;
  // The token's log-probability over the sampled vocabulary: log_softmax of the raw logits, or
  // of the processed distribution (SampleRequest::processed_logprobs).
  float logprob = 0;
  std::vector<TokenLogprob> top;  // SampleRequest::top_logprobs entries, most likely first
};

// A pool block's KV (every layer) copied between device memory and a slot of the host tier
// (replica/core/block_pool.h), or a copy-on-write copy between two pool blocks. A step's moves are
// done in the order recorded, before its other work (prefill, decode): with a host tier, a load
// from a slot recorded before an offload into it reads the old content, and a copy whose source
// or destination block was freed and then loaded into later in the same schedule reads or is
// overwritten in that order.
struct KvTransfer {
  // The values are the kinds of the kernels' move_blocks (kernels/cpu/ops.h, kernels/cuda/ops.h).
  enum class Kind : uint8_t {
    kOffload,  // pool block `block` -> host slot `other` (an eviction)
    kLoad,     // host slot `other` -> pool block `block`
    kCopy,     // pool block `other` -> pool block `block` (copy-on-write)
  };
  Kind kind = Kind::kOffload;
  int32_t block = 0;
  int32_t other = 0;
  friend bool operator==(const KvTransfer&, const KvTransfer&) = default;
};
static_assert(static_cast<int>(KvTransfer::Kind::kOffload) == 0 &&
              static_cast<int>(KvTransfer::Kind::kLoad) == 1 &&
              static_cast<int>(KvTransfer::Kind::kCopy) == 2);

// --kv-host-memory-gb's host tier in whole blocks of `block_bytes` (capped at 2^26; 0: less than
// one block, which make_backend refuses).
int32_t host_tier_blocks(double gigabytes, double block_bytes);

struct ForwardBatch {
  // The step's KV moves, in order, before anything else: copy-on-write copies and, with a host
  // tier (num_host_blocks() > 0), its offloads and loads.
  std::vector<KvTransfer> kv_moves;
  PrefillBatch prefill;
  DecodeBatch decode;
  // Tokens to draw; several may read one logits row (the n siblings' first tokens).
  std::vector<SampleRequest> samples;
  int32_t sample_vocab = 0;    // only ids below it are drawn (the model's vocab may be padded)
  bool return_logits = false;  // also hand the logits back (tests, debugging): a host copy

  // Rows of the logits: chunks with want_logits, in order, then every decode sequence.
  int32_t num_logit_rows() const {
    int32_t n = decode.size();
    for (uint8_t w : prefill.want_logits)
      n += w ? 1 : 0;
    return n;
  }
};

struct ForwardOutput {
  std::vector<SampledToken> samples;  // one per ForwardBatch::samples entry, in order
  // [num_logit_rows, vocab_size] float32 when the batch asked for them, else empty.
  std::vector<float> logits;
};

// Refuses a step whose block ids, tokens, positions, logits rows or cascade-plan indices are out
// of range or inconsistent (forward: invalid batch: ...), before a backend computes anything. The
// batch comes from the engine's own scheduler, so this catches a bug rather than refusing input:
// a backend indexing its caches and workspaces by such a batch would read or write outside them.
// The CPU and CUDA backends run it every step. The KV moves are checked by each backend's
// move_blocks.
Status check_forward_batch(const ForwardBatch& batch, int32_t num_blocks, int32_t block_size,
                           int32_t vocab_size);

// Draws batch.samples from host logits [num_logit_rows, vocab] with the CPU sampler
// (kernels/cpu/sampling.h), top logprobs included: the sampling of backends whose logits live on
// the host (the CPU backend, test fakes).
void sample_on_host(const ForwardBatch& batch, std::span<const float> logits, int32_t vocab,
                    std::vector<SampledToken>& out);

// The top logprobs of sample k from arrays of kMaxTopLogprobs entries per sample (the device's
// output layout; entries with id -1 are past the row's count).
std::vector<TokenLogprob> top_logprobs_of(const SampleRequest& r, const int32_t* ids,
                                          const float* logprobs);

// A step a backend can time without running it: its shape (the step model's terms,
// api/step_model.h) and the seconds it takes.
struct PredictedStep {
  double seconds = 0, prefill_tokens = 0, decode_seqs = 0, kv_gb = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int32_t num_blocks() const = 0;
  virtual int32_t block_size() const = 0;
  // Slots of the host tier (host memory for KV evicted from the pool; BlockPool): 0 without one.
  virtual int32_t num_host_blocks() const { return 0; }
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // How the weights are quantized: "" (as the checkpoint holds them: float32 on the CPU, bf16 on
  // the GPU) or "fp8" (--quantization fp8: the layer matrices in E4M3, per output channel).
  virtual std::string quantization() const { return {}; }
  // The KV cache's element type: "" (the backend's own) or "fp8" (--kv-cache-dtype fp8).
  virtual std::string kv_cache_dtype() const { return {}; }
  // Bytes of one KV element in this backend's cache (4: float32, 2: fp16/bf16): the planner's
  // cost model and the KV-bytes metrics use it.
  virtual int32_t kv_bytes_per_element() const = 0;
  int64_t kv_bytes_per_token() const { return config().kv_bytes_per_token(kv_bytes_per_element()); }
  // Runs the model over the batch and draws the requested tokens. An error (a failed launch,
  // device memory exhausted) leaves the KV of this batch's sequences undefined: the engine ends
  // them. Block copies are applied in order, before any KV write.
  virtual Status forward(const ForwardBatch& batch, ForwardOutput& out) = 0;
  // Steps of assorted shapes with the time this backend knows they take without running them.
  // The replica's step model starts from them (EngineLoop), so that routers know its speed from
  // its first request rather than after 100 steps: on a fleet of two kinds of device, the
  // sessions that began before then stayed where the routers had placed them as equals (on a
  // mixed sim fleet, 197 of the 464 requests its A10Gs served came in the first 5 s of 45).
  // Empty (the CPU and CUDA backends): the time is known only by running, and the model is
  // fitted from the steps run.
  virtual std::vector<PredictedStep> predicted_steps() const { return {}; }

  // Weight updates (POST /v1/admin/weights), between steps. check_weights: the Hugging Face
  // folder can replace this model's weights (check_same_model, every tensor there with its shape:
  // HfFolder::check_tensors), reading only headers. load_weights: the same check, then the
  // folder's tensors replace the weights; the model's config (its name, its context) is kept. A
  // tensor holding a NaN or an infinity is refused before any weight is written (read_f32 checks
  // what it converts, HfFolder::check_finite what goes to a device unconverted). An
  // error found before any weight is written leaves the old weights serving, whole; one while
  // writing (the files changed underneath, a device error) leaves weights_intact() false, and
  // every forward fails until a load succeeds. The KV cache is the caller's to flush.
  virtual Status check_weights(const std::string& folder) const;
  // check_weights, then every floating-point tensor of the folder finite: one pass over all its
  // bytes (HfFolder::check_finite), before an update that aborts the running requests for it
  // (load_weights finds the same later, as it reads).
  Status check_weights_finite(const std::string& folder) const;
  virtual Status load_weights(const std::string& folder);
  virtual bool weights_intact() const { return true; }
};

}  // namespace kvc
