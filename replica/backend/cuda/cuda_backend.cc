#include "replica/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <tuple>

#include "kernels/cuda/device.h"
#include "kernels/cuda/llama.h"
#include "kernels/cuda/nccl_group.h"
#include "replica/backend/cuda/tensor_parallel_backend.h"

namespace kvc {

namespace kc = kernels::cuda;

namespace {

kc::LlamaDims dims_of(const ModelConfig& c) {
  kc::LlamaDims d;
  d.hidden = c.hidden_size;
  d.intermediate = c.intermediate_size;
  d.layers = c.num_hidden_layers;
  d.q_heads = c.num_attention_heads;
  d.kv_heads = c.num_key_value_heads;
  d.head_dim = c.head_dim;
  d.vocab = c.vocab_size;
  d.rms_eps = c.rms_norm_eps;
  d.rope = {c.rope_theta,           c.rope_llama3,           c.rope_factor,
            c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_position};
  d.tied_embeddings = c.tie_word_embeddings;
  d.qkv_bias = c.qkv_bias;
  d.qk_norm = c.qk_norm;
  return d;
}

std::string mib(size_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

CudaBackend::CudaBackend(ModelConfig config, std::unique_ptr<kc::LlamaModel> model,
                         int32_t num_blocks, int32_t block_size, CudaBackendMemory memory)
    : config_(std::move(config)),
      model_(std::move(model)),
      num_blocks_(num_blocks),
      block_size_(block_size),
      memory_(std::move(memory)) {}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::quantization() const {
  return model_->dims().fp8_weights ? "fp8" : "";
}

std::string CudaBackend::kv_cache_dtype() const {
  return model_->dims().fp8_kv ? "fp8" : "";
}

int32_t CudaBackend::kv_bytes_per_element() const {
  return model_->dims().fp8_kv ? 1 : 2;
}

int32_t CudaBackend::num_host_blocks() const {
  return model_->host_blocks();
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::allocate(const ModelConfig& config,
                                                           const CudaBackendOptions& o,
                                                           int32_t tp_size) {
  if (!kc::device_available()) return Error{"--backend cuda: " + kc::device_description()};
  if (Status s = config.validate(); !s.ok()) return Error{s.message()};
  kc::LlamaDims dims = dims_of(config);
  if (tp_size > 1) {
    dims.tp_size = tp_size;
    dims.tied_embeddings = false;  // the rank's LM head is its slice (RankWeights::lm_head_rows)
  }
  dims.fp8_weights = o.fp8_weights.value_or(!config.checkpoint_quantization.empty());
  dims.fp8_kv = o.fp8_kv;
  kc::LlamaCapacity cap;
  cap.block_size = o.block_size;
  cap.max_tokens = std::max(o.max_tokens_per_step, o.max_num_seqs);
  cap.max_samples = std::max(o.max_num_seqs, 1);
  // A step's chunks belong to distinct sequences (a group's prompt, or a sibling recomputing),
  // so there are at most max_num_seqs; each carries its sequence's block table from position 0.
  cap.max_chunks = std::min(cap.max_tokens, std::max(o.max_num_seqs, 1) + 16);
  const int64_t blocks_per_seq =
      (int64_t{config.max_position_embeddings} + o.block_size - 1) / o.block_size;
  cap.max_blocks = static_cast<int>(std::min<int64_t>(blocks_per_seq * cap.max_chunks, 1 << 26));
  CudaBackendMemory mem;
  mem.device = kc::device_description();
  std::tie(mem.device_free, mem.device_total) = kc::LlamaModel::device_memory();
  mem.weight_bytes = kc::LlamaModel::weight_bytes(dims);
  mem.workspace_bytes = kc::LlamaModel::workspace_bytes(dims, cap);
  const size_t block_bytes = kc::LlamaModel::kv_bytes(dims, 1, o.block_size);
  int64_t blocks = o.num_blocks;
  if (blocks <= 0) {
    // The budget is a share of the whole device; what is already in use counts against it.
    const double budget = o.gpu_memory_utilization * static_cast<double>(mem.device_total) -
                          static_cast<double>(mem.device_total - mem.device_free);
    const double left =
        budget - static_cast<double>(mem.weight_bytes) - static_cast<double>(mem.workspace_bytes);
    blocks = left > 0 ? static_cast<int64_t>(left / static_cast<double>(block_bytes)) : 0;
    if (blocks < 1) {
      return Error{"not enough device memory: weights " + mib(mem.weight_bytes) + " + workspace " +
                   mib(mem.workspace_bytes) + " leave no room for the KV cache " +
                   "within --gpu-memory-utilization " + std::to_string(o.gpu_memory_utilization) +
                   " of " + mib(mem.device_total) + " (" + mib(mem.device_free) + " free)"};
    }
    blocks = std::min<int64_t>(blocks, 1 << 24);
  }
  cap.num_blocks = static_cast<int>(blocks);
  mem.kv_bytes = kc::LlamaModel::kv_bytes(dims, cap.num_blocks, o.block_size);
  Result<std::unique_ptr<kc::LlamaModel>> created = kc::LlamaModel::create(dims, cap);
  if (!created.ok()) return Error{"--backend cuda: " + created.error().message};
  std::unique_ptr<kc::LlamaModel> model = std::move(created).value();
  if (o.host_memory_gb > 0) {
    if (tp_size > 1) return Error{"--kv-host-memory-gb: not with tensor parallelism on cuda yet"};
    const int num = host_tier_blocks(o.host_memory_gb, static_cast<double>(block_bytes));
    if (Status s = model->set_host_blocks(num); !s.ok()) {
      return Error{"--kv-host-memory-gb: " + s.message()};
    }
    mem.host_kv_bytes = kc::LlamaModel::kv_bytes(dims, num, o.block_size);
  }
  model->set_graphs(o.cuda_graphs);
  model->set_decode_gemm(o.decode_gemm);
  model->set_gemm_tuning(o.gemm_tuning);
  return std::unique_ptr<CudaBackend>(
      new CudaBackend(config, std::move(model), cap.num_blocks, o.block_size, mem));
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create(const ModelConfig& config,
                                                         const ModelWeights* weights,
                                                         const CudaBackendOptions& o) {
  auto made = allocate(config, o);
  if (!made.ok()) return made;
  std::unique_ptr<CudaBackend> b = std::move(made).value();
  kc::LlamaModel& m = *b->model_;
  if (weights == nullptr) {
    if (Status s = m.random_init(o.weights_seed); !s.ok()) return Error{s.message()};
    return b;
  }
  if (Status s = b->upload_weights(*weights); !s.ok()) return Error{s.message()};
  return b;
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::load(const std::string& folder,
                                                       const CudaBackendOptions& o) {
  Result<HfFolder> f = HfFolder::open(folder);
  if (!f.ok()) return Error{f.error().message};
  // Uploads go from the mapping to the device unconverted: their values are checked here.
  if (Status s = f->check_finite(); !s.ok()) return Error{s.message()};
  auto made = allocate(f->config(), o);
  if (!made.ok()) return made;
  std::unique_ptr<CudaBackend> b = std::move(made).value();
  if (Status s = b->upload_folder(*f); !s.ok()) return Error{s.message()};
  return b;
}

Result<std::unique_ptr<CudaBackend>> CudaBackend::create_rank(const ModelConfig& whole,
                                                              kc::NcclComm& comm,
                                                              const CudaBackendOptions& o) {
  if (Status s = check_tensor_parallel(whole, comm.size()); !s.ok()) return Error{s.message()};
  auto made = allocate(rank_config(whole, comm.size()), o, comm.size());
  if (!made.ok()) return made;
  std::unique_ptr<CudaBackend> b = std::move(made).value();
  if (Status s = b->model_->set_tensor_parallel(&comm); !s.ok()) return Error{s.message()};
  // No GEMM timing on the ranks of a split: it allocates and frees scratch within a step, while
  // this rank's collectives may be pending on the others (cudaFree then can deadlock with NCCL),
  // and the ranks would pick apart. Not yet run on several GPUs either.
  b->model_->set_gemm_tuning(false);
  return b;
}

Status CudaBackend::upload_weights(const ModelWeights& w) {
  if (Status s = check_weight_shapes(w); !s.ok()) return s;
  set_kv_scales(w.kv_scales);
  for (const TensorSpec& t : hf_tensor_specs(w.config)) {
    const Status e =
        model_->upload(t.kind, t.layer, size_t(t.offset), tensor_values(w, t), size_t(t.numel()));
    if (!e.ok()) return Error{"uploading weights: " + t.name + ": " + e.message()};
  }
  return Status::Ok();
}

Status CudaBackend::upload_rank(const RankWeights& w) {
  kc::LlamaModel& m = *model_;
  // The rank's config says tied (its LM head apart, in lm_head_rows); a model whose LM head is
  // its own tensor (every rank of a split, or one whole untied model) takes those rows.
  const bool own_head = !m.dims().tied_embeddings;
  if (own_head && w.lm_head_rows.size() != m.tensor_elements(kernels::ModelTensor::kLmHead)) {
    return Error{"the rank's LM head rows do not fit its model"};
  }
  if (Status s = upload_weights(w.weights); !s.ok()) return s;
  if (own_head) {
    const Status e =
        m.upload(kernels::ModelTensor::kLmHead, 0, 0, w.lm_head_rows.data(), w.lm_head_rows.size());
    if (!e.ok()) return Error{"uploading the LM head's rows: " + e.message()};
  }
  return m.finish_uploads();
}

void CudaBackend::set_kv_scales(const KvCacheScales& scales) {
  const std::vector<float> ones(config_.num_hidden_layers, 1.0f);
  model_->set_kv_scales(scales.empty() ? ones : scales.k, scales.empty() ? ones : scales.v);
}

Status CudaBackend::upload_folder(const HfFolder& f) {
  return upload_rank_folder(f, 0, 1);  // the whole model: a group of one's only rank
}

Status CudaBackend::upload_rank_folder(const HfFolder& f, int32_t rank, int32_t size) {
  kc::LlamaModel& m = *model_;
  Result<RankPlan> plan = plan_rank(f.config(), f.specs(), rank, size);
  if (!plan.ok()) return Error{plan.error().message};
  Result<KvCacheScales> kv_scales = f.kv_cache_scales();
  if (!kv_scales.ok()) return Error{kv_scales.error().message};
  set_kv_scales(*kv_scales);
  // F32 and FP8 values go through one float32 host buffer, in pieces of whole rows of at most
  // kPiece values (a column slice whole); BF16 / F16 go from the mapping through upload_half's
  // pinned staging, overlapped with the DMA (a column slice gathered first).
  constexpr int64_t kPiece = int64_t{1} << 24;
  std::vector<std::byte> gathered;
  std::vector<float> values;
  // `slice` of the whole tensor `full` into the model's `kind` at `offset` (`count` elements).
  auto put = [&](const TensorSpec& full, const std::optional<TensorSlice>& slice,
                 kernels::ModelTensor kind, int layer, size_t offset, size_t count) -> Status {
    Result<TensorView> v = f.tensor(full.name, full.shape);
    if (!v.ok()) return Error{v.error().message};
    const bool columns = slice && slice->dim != 0;
    const int64_t cols = full.shape.size() == 2 ? full.shape[1] : 1;
    const int64_t first = slice && !columns ? slice->begin : 0;  // rows: as they lie
    if (v->dtype == DType::kBF16 || v->dtype == DType::kF16) {
      const bool f16 = v->dtype == DType::kF16;
      const std::byte* src = v->bytes.data();
      if (!columns) return m.upload_half(kind, layer, offset, src + first * cols * 2, count, f16);
      gathered.resize(count * 2);
      copy_slice_bytes(src, 2, full.shape, slice, gathered.data());
      return m.upload_half(kind, layer, offset, gathered.data(), count, f16);
    }
    if (columns) {
      values.resize(count);
      if (Status e = f.read_f32(full.name, full.shape, values.data(), slice); !e.ok()) return e;
      return m.upload(kind, layer, offset, values.data(), count);
    }
    const int64_t rows = int64_t(count) / cols, step = std::max<int64_t>(1, kPiece / cols);
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t n = std::min(step, rows - r);
      values.resize(size_t(n * cols));
      if (Status e = f.read_f32(full.name, full.shape, values.data(), TensorSlice{0, first + r, n});
          !e.ok()) {
        return e;
      }
      if (Status e = m.upload(kind, layer, offset + size_t(r * cols), values.data(), values.size());
          !e.ok()) {
        return e;
      }
    }
    return Status::Ok();
  };
  for (const RankTensor& t : plan->tensors) {
    const Status e = put(t.full, t.slice, t.part.kind, t.part.layer, size_t(t.part.offset),
                         size_t(t.part.numel()));
    if (!e.ok()) {
      (void)m.finish_uploads();
      return Error{t.full.name + ": " + e.message()};
    }
  }
  // The LM head: every rank of a split (and a whole untied model) has its own rows.
  if (!m.dims().tied_embeddings) {
    const size_t h = size_t(config_.hidden_size), rows = size_t(plan->vocab.rows);
    const size_t padded = size_t(plan->vocab.padded);
    if (padded * h != m.tensor_elements(kernels::ModelTensor::kLmHead)) {
      (void)m.finish_uploads();
      return Error{"the rank's LM head rows do not fit its model"};
    }
    Status e = Status::Ok();
    if (rows > 0) {
      e = put(plan->head, TensorSlice{0, plan->vocab.begin, plan->vocab.rows},
              kernels::ModelTensor::kLmHead, 0, 0, rows * h);
    }
    if (e.ok() && padded > rows) {
      const std::vector<float> zeros((padded - rows) * h, 0.0f);
      e = m.upload(kernels::ModelTensor::kLmHead, 0, rows * h, zeros.data(), zeros.size());
    }
    if (!e.ok()) {
      (void)m.finish_uploads();
      return Error{"uploading the LM head's rows: " + e.message()};
    }
  }
  return m.finish_uploads();
}

Status CudaBackend::check_weights(const std::string& folder) const {
  return check_replacement(folder, config_);
}

Status note_weights_written(const Status& written, std::string& broken) {
  if (!written.ok()) {
    broken = "a weight update failed while writing the weights (" + written.message() +
             "): load a complete checkpoint";
    return Error{broken};
  }
  broken.clear();
  return Status::Ok();
}

Status CudaBackend::load_weights(const std::string& folder) {
  Result<HfFolder> f = open_replacement(folder, config_);
  if (!f.ok()) return Error{f.error().message};
  // A NaN or infinity is refused before the upload writes any weight: the old ones keep serving.
  if (Status s = f->check_finite(); !s.ok()) return s;
  return note_weights_written(upload_folder(*f), weights_broken_);
}

void CudaBackend::set_profile(bool on) {
  model_->set_profile(on);
}

void CudaBackend::set_graphs(bool on) {
  model_->set_graphs(on);
}

Status CudaBackend::forward(const ForwardBatch& batch, ForwardOutput& out) {
  if (!weights_broken_.empty()) return Error{weights_broken_};
  // Before any upload, KV move or launch: the kernels index the caches and workspaces by the
  // batch. A tensor-parallel rank checks against its own pool (at least the group's num_blocks),
  // and a refusal on any rank aborts the group, as any failed step does.
  if (Status s = check_forward_batch(batch, num_blocks_, block_size_, config_.vocab_size);
      !s.ok()) {
    return s;
  }
  kc::LlamaStep st;
  moves_.clear();
  for (const KvTransfer& t : batch.kv_moves) {  // KvTransfer::Kind's values are the kernel's
    moves_.push_back(static_cast<int32_t>(t.kind));
    moves_.push_back(t.block);
    moves_.push_back(t.other);
  }
  st.moves = moves_;
  const PrefillBatch& p = batch.prefill;
  if (!p.empty()) {
    st.prefill_tokens = p.tokens;
    st.token_indptr = p.token_indptr;
    st.start_pos = p.start_pos;
    st.block_indptr = p.block_indptr;
    st.block_indices = p.block_indices;
    st.want_logits = p.want_logits;
  }
  st.decode_tokens = batch.decode.tokens;
  st.decode_positions = batch.decode.positions;
  st.decode_slots = batch.decode.slots;
  st.plan = &batch.decode.plan;
  sample_rows_.clear();
  params_.resize(batch.samples.size() * sizeof(kernels::sampling::SampleParams));
  auto* params = reinterpret_cast<kernels::sampling::SampleParams*>(params_.data());
  for (size_t k = 0; k < batch.samples.size(); ++k) {
    const SampleRequest& r = batch.samples[k];
    sample_rows_.push_back(r.logits_row);
    params[k] = r.params();
    st.top_logprobs = std::max(st.top_logprobs, kernels::sampling::top_logprobs(params[k]));
  }
  st.sample_rows = sample_rows_;
  st.sample_params = {params, batch.samples.size()};
  st.sample_vocab = batch.sample_vocab;
  st.return_logits = batch.return_logits;
  kc::LlamaOutput result;
  if (Status s = model_->forward(st, result); !s.ok()) return s;
  timing_ = {
      result.host_us, result.prep_us, result.wait_us, result.device_us, std::move(result.profile),
      result.graph};
  out.samples.resize(result.tokens.size());
  constexpr size_t kTop = kernels::sampling::kMaxTopLogprobs;
  for (size_t k = 0; k < result.tokens.size(); ++k) {
    out.samples[k] = SampledToken{result.tokens[k], result.logprobs[k], {}};
    if (!result.top_ids.empty()) {
      out.samples[k].top = top_logprobs_of(batch.samples[k], result.top_ids.data() + k * kTop,
                                           result.top_logprobs.data() + k * kTop);
    }
  }
  out.logits = std::move(result.logits);
  return Status::Ok();
}

namespace {

// What start-up allocated on one device (`who`: the backend, or a tensor-parallel rank).
void log_allocation(const CudaBackend& b, const std::string& who) {
  const CudaBackendMemory& m = b.memory();
  auto mib = [](size_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  std::fprintf(
      stderr,
      "%s on %s: weights %.0f MiB (%s), workspace %.0f MiB, KV cache %.0f MiB "
      "(%d blocks of %d tokens, %s); %.0f of %.0f MiB were free\n",
      who.c_str(), m.device.c_str(), mib(m.weight_bytes),
      b.quantization() == "fp8" ? "layer matrices FP8 E4M3, per-channel scales" : "bf16",
      mib(m.workspace_bytes), mib(m.kv_bytes), b.num_blocks(), b.block_size(),
      b.kv_cache_dtype() == "fp8" ? "FP8 E4M3, 1 byte per element: twice the blocks" : "bf16",
      mib(m.device_free), mib(m.device_total));
  if (b.num_host_blocks() > 0) {
    std::fprintf(stderr, "%s: host tier %.0f MiB of pinned host memory (%d blocks)\n", who.c_str(),
                 mib(m.host_kv_bytes), b.num_host_blocks());
  }
}

// --tensor-parallel-size N > 1: the preset's or folder's model over GPUs 0..N-1.
Result<std::unique_ptr<Backend>> make_cuda_tensor_parallel_backend(const BackendOptions& f,
                                                                   const CudaBackendOptions& o,
                                                                   int32_t min_vocab) {
  const int32_t size = f.tensor_parallel_size;
  Result<std::unique_ptr<CudaTensorParallelBackend>> made = Error{""};
  if (!f.model_dir.empty()) {
    made = CudaTensorParallelBackend::load(f.model_dir, size, o);
  } else {
    auto config = preset_config(f.preset_or_default());
    if (!config.ok()) return Error{config.error().message};
    config->vocab_size = std::max(config->vocab_size, min_vocab);
    made = CudaTensorParallelBackend::create(*config, nullptr, size, o);
  }
  if (!made.ok()) return Error{made.error().message};
  CudaTensorParallelBackend& tp = **made;
  const ModelConfig& whole = tp.config();
  const ModelConfig rank = rank_config(whole, size);
  std::fprintf(stderr,
               "tensor parallelism over %d GPUs (%s, a thread per GPU): each rank %d of %d query "
               "heads, %d of %d KV heads, %d of %d intermediate columns, %d LM-head rows of %d; "
               "KV pool %d blocks per rank\n",
               size, kernels::cuda::nccl_description().c_str(), rank.num_attention_heads,
               whole.num_attention_heads, rank.num_key_value_heads, whole.num_key_value_heads,
               rank.intermediate_size, whole.intermediate_size,
               vocab_slice(whole.vocab_size, 0, size).padded, whole.vocab_size, tp.num_blocks());
  for (int32_t r = 0; r < size; ++r)
    log_allocation(tp.rank(r), "rank " + std::to_string(r));
  return std::unique_ptr<Backend>(std::move(made).value());
}

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& f, int32_t min_vocab) {
  CudaBackendOptions o;
  o.num_blocks = f.kv_blocks;
  o.block_size = f.block_size;
  o.gpu_memory_utilization = f.memory_utilization_or_default();
  o.max_tokens_per_step = f.max_tokens_per_step;
  o.max_num_seqs = f.max_num_seqs;
  o.weights_seed = f.seed_or_default();
  o.cuda_graphs = f.cuda_graphs.value_or(true);
  o.decode_gemm = f.decode_gemm;
  o.gemm_tuning = f.gemm_tuning.value_or(true);
  if (!f.quantization.empty()) o.fp8_weights = f.quantization == "fp8";  // else as the checkpoint
  o.fp8_kv = f.fp8_kv();
  o.host_memory_gb = f.kv_host_memory_gb.value_or(0);
  if (f.tensor_parallel_size > 1) return make_cuda_tensor_parallel_backend(f, o, min_vocab);
  Result<std::unique_ptr<CudaBackend>> made = Error{""};
  if (!f.model_dir.empty()) {
    made = CudaBackend::load(f.model_dir, o);
  } else {
    auto config = preset_config(f.preset_or_default());
    if (!config.ok()) return Error{config.error().message};
    config->vocab_size = std::max(config->vocab_size, min_vocab);
    made = CudaBackend::create(*config, nullptr, o);
  }
  if (!made.ok()) return Error{made.error().message};
  log_allocation(**made, "cuda backend");
  return std::unique_ptr<Backend>(std::move(made).value());
}

}  // namespace kvc
