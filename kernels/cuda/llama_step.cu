// LlamaModel::forward: one step of the model on the device (staging, plans, the layers, the LM
// head and sampling). The model's allocation and weights are in llama.cu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/cuda/llama_impl.cuh"
#include "kernels/cuda/nccl_group.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/sampling.h"

namespace kvc::kernels::cuda {

Status LlamaModel::forward(const LlamaStep& st, LlamaOutput& out) {
  Status status = run_step(st, out);
  if (!status.ok()) {
    // Operations already queued may still read the staging buffers the next step rewrites:
    // let them drain, and clear a non-sticky error, before anything else runs.
    cudaStreamSynchronize(impl_->stream);
    (void)cudaGetLastError();
  }
  return status;
}

Status LlamaModel::run_step(const LlamaStep& st, LlamaOutput& out) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point entered = Clock::now();
  Impl& I = *impl_;
  const LlamaDims& d = dims_;
  const LlamaCapacity& c = capacity_;
  const int num_chunks = st.token_indptr.empty() ? 0 : static_cast<int>(st.token_indptr.size()) - 1;
  const int prefill_rows = static_cast<int>(st.prefill_tokens.size());
  const int decode_rows = static_cast<int>(st.decode_tokens.size());
  const int rows = prefill_rows + decode_rows;
  const int num_samples = static_cast<int>(st.sample_rows.size());
  const int num_moves = static_cast<int>(st.moves.size() / 3);
  for (int i = 0; i < num_moves && I.host_kv == nullptr; ++i) {
    if (st.moves[3 * i] != 2) return Error{"host tier moves without a host tier"};
  }
  if (rows > c.max_tokens || num_chunks > c.max_chunks ||
      static_cast<int>(st.block_indices.size()) > c.max_blocks || num_samples > c.max_samples) {
    return Error{"step exceeds the capacity the model was created for"};
  }
  out.tokens.assign(num_samples, 0);
  out.logprobs.assign(num_samples, 0.0f);
  out.top_ids.clear();
  out.top_logprobs.clear();
  out.logits.clear();

  // 1. Host staging: every index array of the step, then one copy to the device.
  const StageLayout sl = stage_layout(c);
  auto* hw = reinterpret_cast<int32_t*>(I.host_stage);
  auto put = [&](size_t at, std::span<const int32_t> v) {
    std::memcpy(hw + at, v.data(), v.size() * 4);
  };
  put(sl.tokens, st.prefill_tokens);
  std::memcpy(hw + sl.tokens + prefill_rows, st.decode_tokens.data(), decode_rows * 4);
  // Positions and cache slots of the prefill rows, from the chunks.
  std::vector<int32_t> act_row_of_logit_row;
  for (int ch = 0; ch < num_chunks; ++ch) {
    const int32_t* table = st.block_indices.data() + st.block_indptr[ch];
    for (int32_t r = st.token_indptr[ch]; r < st.token_indptr[ch + 1]; ++r) {
      const int32_t pos = st.start_pos[ch] + (r - st.token_indptr[ch]);
      hw[sl.positions + r] = pos;
      hw[sl.slots + r] = table[pos / c.block_size] * c.block_size + pos % c.block_size;
    }
    if (st.want_logits[ch]) act_row_of_logit_row.push_back(st.token_indptr[ch + 1] - 1);
  }
  for (int i = 0; i < decode_rows; ++i) {
    hw[sl.positions + prefill_rows + i] = st.decode_positions[i];
    hw[sl.slots + prefill_rows + i] = st.decode_slots[i];
    act_row_of_logit_row.push_back(prefill_rows + i);
  }
  if (num_chunks > 0) {
    put(sl.q_indptr, st.token_indptr);
    put(sl.start_pos, st.start_pos);
    put(sl.block_indptr, st.block_indptr);
    std::memcpy(I.host_stage + sl.block_indices_bytes, st.block_indices.data(),
                st.block_indices.size() * 4);
  }
  for (int k = 0; k < num_samples; ++k) {
    const int32_t r = st.sample_rows[k];
    if (r < 0 || r >= static_cast<int32_t>(act_row_of_logit_row.size())) {
      return Error{"sample reads a logits row the step does not produce"};
    }
    hw[sl.sample_act_rows + k] = act_row_of_logit_row[r];
  }
  std::memcpy(I.host_stage + sl.params, st.sample_params.data(),
              num_samples * sizeof(sampling::SampleParams));
  const auto* dw = reinterpret_cast<const int32_t*>(I.dev_stage);
  const auto* dparams = reinterpret_cast<const sampling::SampleParams*>(I.dev_stage + sl.params);

  // Plans: prefill work list and the cascade plan, each one more async copy.
  PrefillPlan pplan;
  if (num_chunks > 0) {
    pplan = make_prefill_plan(I.shape, st.token_indptr.data(), st.start_pos.data(), num_chunks);
    KVC_TRY(I.grow(&I.prefill_plan_buf, &I.prefill_plan_bytes, prefill_workspace_bytes(pplan)),
            "prefill plan buffer");
  }
  DeviceCascadePlan dplan;
  size_t decode_ws_need = 0;
  if (decode_rows > 0) {
    if (st.plan == nullptr || st.plan->num_seqs != decode_rows)
      return Error{"decode without a plan"};
    PlanOptions po;
    po.kv_element_bytes = d.fp8_kv ? 1 : 2;
    po.ws_prefix = ws_prefix_override();
    dplan = make_device_plan(*st.plan, I.shape, 0, po);
    KVC_TRY(I.grow(&I.decode_plan_buf, &I.decode_plan_bytes, dplan.device_bytes()),
            "decode plan buffer");
    decode_ws_need = cascade_workspace_bytes(dplan, I.shape);
    KVC_TRY(I.grow(&I.decode_ws, &I.decode_ws_bytes, decode_ws_need), "decode workspace");
  }
  if (num_moves > 0) {
    KVC_TRY(I.grow(&I.moves_buf, &I.moves_bytes, st.moves.size() * 4, /*graphs_read_it=*/false),
            "moves buffer");
  }
  // The host work is done: from here the device runs the step (the step_begin event).
  const Clock::time_point launching = Clock::now();
  I.num_marks = 0;
  KVC_TRY(cudaEventRecord(I.step_begin, I.stream), "event");
  // Up to the end of the block tables this step uses (they come last).
  const size_t stage_used = sl.block_indices_bytes + st.block_indices.size() * 4;
  KVC_TRY(cudaMemcpyAsync(I.dev_stage, I.host_stage, stage_used, cudaMemcpyHostToDevice, I.stream),
          "staging copy");
  if (num_chunks > 0) {
    KVC_TRY(upload_prefill_plan(pplan, I.prefill_plan_buf, I.prefill_plan_bytes, I.stream),
            "prefill plan upload");
  }
  if (decode_rows > 0) {
    KVC_TRY(upload_plan(dplan, I.decode_plan_buf, I.decode_plan_bytes, I.stream),
            "decode plan upload");
  }
  I.mark("staging", I.stream);

  const int h = d.hidden, qd = d.q_heads * d.head_dim, kvd = d.kv_heads * d.head_dim,
            ff = d.intermediate;
  cudaStream_t s = I.stream;
  Gemm& g = *I.gemm;
  // With FP8 weights a layer GEMM reads the E4M3 rows (and per-row scales) its producer wrote
  // (xq or actq) and the matrix's codes and per-channel scales; else bf16 x and w. cuBLASLt
  // applies both scales, or (fp8_scales_in_readers) the GEMM sums the codes' products
  // (per-tensor kernels) and the op that reads its output applies them (ops.h Fp8Dequant: `dq`
  // below). A reader may write the activation scales it reads (the norm after o_proj): only its
  // own row's, after reading them.
  // Split over several ranks, each rank's activation scales differ, so the row-parallel GEMMs'
  // (o, down) raw partial sums could not be added: cuBLASLt applies their scales (raw_rp off);
  // qkv and gate_up, whose outputs stay on their rank, keep raw.
  const bool fp8 = d.fp8_weights, raw = fp8 && I.fp8_scales_in_readers;
  const bool raw_rp = raw && !(I.comm != nullptr && I.comm->size() > 1);  // o's and down's
  auto layer_gemm = [&](bool raw_out, const void* x, const void* xq, const float* x_scales,
                        const void* w, const float* w_scales, void* y, int n, int k) {
    if (raw_out) return g.run_fp8_raw(xq, w, y, rows, n, k, GemmOut::kBF16, s);
    return fp8 ? g.run_fp8(xq, x_scales, w, w_scales, y, rows, n, k, GemmOut::kBF16, s)
               : g.run(x, w, y, rows, n, k, GemmOut::kBF16, s);
  };
  auto dq = [&](const float* x_scales, const float* w_scales) {
    return raw ? Fp8Dequant{x_scales, w_scales} : Fp8Dequant{};
  };
  auto dq_rp = [&](const float* x_scales, const float* w_scales) {  // o's and down's readers
    return raw_rp ? Fp8Dequant{x_scales, w_scales} : Fp8Dequant{};
  };
  auto norm = [&](const void* x, bool accumulate, const void* weight, const Fp8Dequant& x_dq) {
    return fp8 ? add_rms_norm_fp8(x, I.residual, accumulate, weight, I.xq, I.xq_scales, rows, h,
                                  d.rms_eps, s, x_dq)
               : add_rms_norm(x, I.residual, accumulate, weight, I.xn, rows, h, d.rms_eps, s);
  };
  // Tensor parallelism: the row-parallel projections' partial sums, added over the group.
  auto all_reduce = [&](void* data, const char* what) -> Status {
    if (I.comm == nullptr) return Status::Ok();
    if (Status e = I.comm->all_reduce_bf16(data, size_t(rows) * h, s); !e.ok()) {
      return Error{std::string(what) + ": " + e.message()};
    }
    I.mark(what, s);
    return Status::Ok();
  };
  // 2. The KV moves in order: copy-on-write copies, the host tier's offloads and loads.
  if (num_moves > 0) {
    // From pageable memory: returns once the values are staged, so st.moves may go.
    KVC_TRY(cudaMemcpyAsync(I.moves_buf, st.moves.data(), st.moves.size() * 4,
                            cudaMemcpyHostToDevice, s),
            "moves copy");
    KVC_OP(move_blocks(I.kv, I.kv_layout, I.host_kv_dev, I.host_layout,
                       static_cast<const int32_t*>(I.moves_buf), st.moves.data(), num_moves, s),
           "move_blocks");
  }
  // 3-4: the layers, the LM head, sampling and the tokens' copy back: enqueued as they are, or
  // captured into (and replayed from) a CUDA graph for a pure decode step.
  auto body = [&]() -> Status {
    if (rows > 0) {
      // 3. Embeddings.
      KVC_OP(embedding_gather(I.embed, d.vocab, h, dw + sl.tokens, rows, I.x, s),
             "embedding_gather");
      KVC_OP(rope_angles(dw + sl.positions, rows, I.rope, I.rope_cs, s), "rope_angles");
      for (int layer = 0; layer < d.layers; ++layer) {
        const Impl::Layer& L = I.layers[layer];
        void* kc = I.kv_layout.k(I.kv, layer);
        void* vc = I.kv_layout.v(I.kv, layer);
        // Attention block.
        KVC_OP(
            norm(layer == 0 ? I.x : I.proj, layer > 0, L.attn_norm,
                 layer == 0 ? Fp8Dequant{} : dq_rp(I.act_scales, I.layers[layer - 1].down_scale)),
            "add_rms_norm");
        // One GEMM for q, k and v; one launch rotates q into the contiguous buffer the
        // attention kernels read and writes rotated k and v to the cache from the QKV rows.
        const int64_t qkv_row = qd + 2 * kvd;
        auto* qkv = static_cast<__nv_bfloat16*>(I.qkv);
        KVC_OP(layer_gemm(raw, I.xn, I.xq, I.xq_scales, L.qkv, L.qkv_scale, qkv,
                          static_cast<int>(qkv_row), h),
               "qkv_proj");
        // The QKV values' scales are applied by the first op that reads them.
        Fp8Dequant qkv_dq = dq(I.xq_scales, L.qkv_scale);
        if (d.qkv_bias || d.qk_norm) {  // Qwen2's biases, Qwen3's q/k norms
          KVC_OP(qkv_bias_norm(qkv, qkv_row, rows, d.q_heads, d.kv_heads, d.head_dim, L.qkv_bias,
                               L.q_norm, L.k_norm, d.rms_eps, s, qkv_dq),
                 "qkv_bias_norm");
          qkv_dq = {};
        }
        KVC_OP(rope_kv_append(qkv, qkv_row, d.q_heads, qkv + qd, qkv_row, qkv + qd + kvd, qkv_row,
                              d.kv_heads, d.head_dim, I.rope_cs, rows, I.q, qd, dw + sl.slots,
                              KvDtype::kBF16, kc, vc, s, I.kv_quant[layer], qkv_dq),
               "rope_kv_append");
        if (num_chunks > 0) {
          KVC_OP(
              paged_prefill(I.shape, KvDtype::kBF16, pplan, I.q, kc, vc, dw + sl.q_indptr,
                            dw + sl.block_indptr,
                            reinterpret_cast<const int32_t*>(I.dev_stage + sl.block_indices_bytes),
                            dw + sl.start_pos, I.attn, nullptr, s, I.kv_quant[layer]),
              "paged_prefill");
        }
        // With FP8 weights the o projection's input is E4M3 rows: the decode rows' are written by
        // the attention's merge (attention.h Fp8RowsOut), the prefill rows' by a pass of their own.
        const Fp8ScaleLayout attn_scales = fp8_activation_scales(rows, qd);
        const bool rows_in_merge = fp8 && I.fp8_attention_rows_in_merge;
        if (decode_rows > 0) {
          const size_t off = size_t(prefill_rows) * qd;
          const Fp8RowsOut attn_q{static_cast<uint8_t*>(I.xq) + off, I.xq_scales + prefill_rows,
                                  attn_scales.stride, attn_scales.blocks};
          KVC_OP(cascade_decode(
                     I.shape, KvDtype::kBF16, dplan, static_cast<__nv_bfloat16*>(I.q) + off, kc, vc,
                     static_cast<__nv_bfloat16*>(I.attn) + off, nullptr, I.decode_ws,
                     I.decode_ws_bytes, s, I.kv_quant[layer], rows_in_merge ? &attn_q : nullptr),
                 "cascade_decode");
        }
        if (const int quantized = rows_in_merge ? prefill_rows : rows; fp8 && quantized > 0) {
          KVC_OP(quantize_rows_fp8(I.attn, qd, quantized, qd, I.xq, I.xq_scales, attn_scales, s),
                 "quantize attn");
        }
        KVC_OP(layer_gemm(raw_rp, I.attn, I.xq, I.xq_scales, L.o, L.o_scale, I.proj, h, qd),
               "o_proj");
        if (Status e = all_reduce(I.proj, "o_proj all-reduce"); !e.ok()) return e;
        // MLP block.
        KVC_OP(norm(I.proj, true, L.mlp_norm, dq_rp(I.xq_scales, L.o_scale)), "add_rms_norm");
        KVC_OP(layer_gemm(raw, I.xn, I.xq, I.xq_scales, L.gate_up, L.gate_up_scale, I.gate_up,
                          2 * ff, h),
               "gate_up_proj");
        if (fp8) {
          KVC_OP(silu_mul_fp8(I.gate_up, I.actq, I.act_scales, rows, ff, s,
                              dq(I.xq_scales, L.gate_up_scale)),
                 "silu_mul");
        } else {
          KVC_OP(silu_mul(I.gate_up, I.act, rows, ff, s), "silu_mul");
        }
        KVC_OP(layer_gemm(raw_rp, I.act, I.actq, I.act_scales, L.down, L.down_scale, I.proj, h, ff),
               "down_proj");
        if (Status e = all_reduce(I.proj, "down_proj all-reduce"); !e.ok()) return e;
      }
      // 4. Final norm, then the LM head over one row per sample (siblings' first tokens share a
      // row: it is gathered once per sample), then sampling.
      KVC_OP(add_rms_norm(I.proj, I.residual, true, I.final_norm, I.xn, rows, h, d.rms_eps, s,
                          dq_rp(I.act_scales, I.layers[d.layers - 1].down_scale)),
             "final norm");
    }
    if (num_samples > 0) {
      KVC_OP(embedding_gather(I.xn, rows, h, dw + sl.sample_act_rows, num_samples, I.xs, s),
             "gather sample rows");
      // Tensor parallelism: each rank's rows of the LM head, then every rank's logits gathered.
      const int lm_rows = d.lm_head_rows();
      float* lm_out = I.comm != nullptr ? I.logits_part : I.logits;
      KVC_OP(g.run(I.xs, I.lm_head, lm_out, num_samples, lm_rows, h, GemmOut::kF32, s), "lm_head");
      if (I.comm != nullptr) {
        if (Status e = I.comm->all_gather_f32(I.logits_part, size_t(num_samples) * lm_rows,
                                              I.logits_ranks, s);
            !e.ok()) {
          return Error{"lm_head all-gather: " + e.message()};
        }
        KVC_OP(gather_vocab_parts(I.logits_ranks, I.comm->size(), num_samples, lm_rows, d.vocab,
                                  I.logits, s),
               "gather logits");
      }
      KVC_OP(sample(I.logits, num_samples, st.sample_vocab > 0 ? st.sample_vocab : d.vocab, d.vocab,
                    dparams, I.tokens_out, I.logprobs_out, I.norms_out, s),
             "sample");
      if (st.top_logprobs > 0) {
        KVC_OP(top_logprobs(I.logits, num_samples, st.sample_vocab > 0 ? st.sample_vocab : d.vocab,
                            d.vocab, dparams, I.norms_out, I.top_ids_out, I.top_logprobs_out,
                            st.top_logprobs, s),
               "top logprobs");
        const size_t top_bytes = size_t(num_samples) * sampling::kMaxTopLogprobs * 4;
        KVC_TRY(cudaMemcpyAsync(I.host_top_ids_out, I.top_ids_out, top_bytes,
                                cudaMemcpyDeviceToHost, s),
                "top logprobs copy");
        KVC_TRY(cudaMemcpyAsync(I.host_top_logprobs_out, I.top_logprobs_out, top_bytes,
                                cudaMemcpyDeviceToHost, s),
                "top logprobs copy");
      }
      KVC_TRY(cudaMemcpyAsync(I.host_tokens_out, I.tokens_out, num_samples * 4,
                              cudaMemcpyDeviceToHost, s),
              "tokens copy");
      KVC_OP(cudaMemcpyAsync(I.host_logprobs_out, I.logprobs_out, num_samples * 4,
                             cudaMemcpyDeviceToHost, s),
             "logprobs copy");
    }
    return {};
  };
  out.graph = false;
  // Split over several ranks, the ranks replay, capture or run eagerly together: each step
  // they vote on what they would do (a step on which they differ runs eagerly everywhere and
  // turns graphs off), and a capture is kept only where it succeeded on every rank, so each
  // rank's collectives run in the same steps as its peers'.
  NcclComm* group = I.comm != nullptr && I.comm->size() > 1 ? I.comm : nullptr;
  const bool eligible = I.graphs_on && !I.profile && num_chunks == 0 && decode_rows > 0;
  auto graphs_off = [&](const std::string& why) {
    I.graphs_on = false;
    I.drop_graphs();
    I.graph_stats.disabled = why;
  };
  std::vector<int64_t> key;
  Impl::GraphEntry* entry = nullptr;
  bool capture = false;
  if (eligible) {
    // Everything the enqueued work depends on besides the contents of the staging and plan
    // buffers: equal signatures enqueue identical launches.
    const auto& o = dplan.offsets;
    key = {rows,
           num_samples,
           st.sample_vocab,
           st.top_logprobs,
           dplan.num_seqs,
           dplan.num_nodes,
           dplan.num_node_items,
           dplan.node_chunk_tokens,
           dplan.num_prefix_ctas,
           dplan.suffix.num_splits,
           dplan.suffix.split_tokens,
           dplan.wide_path,
           dplan.ws_prefix,
           dplan.num_node_units,
           o.node_block_indptr,
           o.node_block_indices,
           o.node_seq_indptr,
           o.node_seq_indices,
           o.node_unit_base,
           o.node_items,
           o.suffix_block_indptr,
           o.suffix_block_indices,
           o.suffix_len,
           o.seq_unit_indptr,
           o.seq_units,
           reinterpret_cast<int64_t>(I.decode_plan_buf),
           reinterpret_cast<int64_t>(I.decode_ws),
           static_cast<int64_t>(I.decode_ws_bytes)};
    entry = I.find_graph(key);
    capture = entry == nullptr && key == I.last_key;
  }
  if (group != nullptr && !group->all_agree(!eligible          ? 0
                                            : entry != nullptr ? 1
                                            : capture          ? 2
                                                               : 3)) {
    entry = nullptr;
    capture = false;
    if (I.graphs_on) {
      graphs_off("the tensor-parallel ranks' graph decisions differed; steps run eagerly");
    }
  }
  if (capture) {
    KVC_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "graph capture");
    const Status captured = body();
    std::string failed = captured.message();
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(s, &graph);
    cudaGraphExec_t exec = nullptr;
    if (captured.ok() && e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (captured.ok() && e != cudaSuccess) failed = cudaGetErrorString(e);
    bool ok = captured.ok() && e == cudaSuccess;
    if (group != nullptr && !group->all_agree(ok ? 1 : 0) && ok) {
      failed = "on another tensor-parallel rank";
      ok = false;
    }
    if (!ok) {
      (void)cudaGetLastError();
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      graphs_off("CUDA graph capture failed (" + failed + "); steps run eagerly");
    } else {
      if (I.graphs.size() == Impl::kMaxGraphs) {
        auto lru =
            std::min_element(I.graphs.begin(), I.graphs.end(),
                             [](const auto& a, const auto& b) { return a.last_use < b.last_use; });
        cudaGraphExecDestroy(lru->exec);
        I.graphs.erase(lru);
        ++I.graph_stats.evictions;
      }
      I.graphs.push_back({key, exec, ++I.graph_clock});
      entry = &I.graphs.back();
      ++I.graph_stats.captures;
    }
  }
  if (eligible) {
    I.last_key = std::move(key);
  } else if (num_chunks > 0) {
    I.last_key.clear();
  }
  if (entry != nullptr) {
    KVC_TRY(cudaGraphLaunch(entry->exec, s), "graph launch");
    ++I.graph_stats.replays;
    out.graph = true;
  }
  if (!out.graph) {
    if (Status e = body(); !e.ok()) return e;
  }
  KVC_TRY(cudaEventRecord(I.step_end, s), "event");
  const Clock::time_point waiting = Clock::now();
  KVC_TRY(cudaStreamSynchronize(s), "step");
  const Clock::time_point done = Clock::now();
  out.host_us = std::chrono::duration<double, std::micro>(waiting - entered).count();
  out.prep_us = std::chrono::duration<double, std::micro>(launching - entered).count();
  out.profile.clear();
  if (I.profile) {
    cudaEvent_t prev = I.step_begin;
    for (size_t i = 0; i < I.num_marks; ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, prev, I.marks[i]);
      prev = I.marks[i];
      auto it = std::find_if(out.profile.begin(), out.profile.end(),
                             [&](const auto& p) { return p.first == I.mark_names[i]; });
      if (it == out.profile.end()) {
        out.profile.emplace_back(I.mark_names[i], ms * 1e3);
      } else {
        it->second += ms * 1e3;
      }
    }
  }
  out.wait_us = std::chrono::duration<double, std::micro>(done - waiting).count();
  float device_ms = 0;
  KVC_TRY(cudaEventElapsedTime(&device_ms, I.step_begin, I.step_end), "event");
  out.device_us = device_ms * 1e3;
  std::memcpy(out.tokens.data(), I.host_tokens_out, num_samples * 4);
  std::memcpy(out.logprobs.data(), I.host_logprobs_out, num_samples * 4);
  if (st.top_logprobs > 0) {
    const size_t entries = size_t(num_samples) * sampling::kMaxTopLogprobs;
    out.top_ids.assign(I.host_top_ids_out, I.host_top_ids_out + entries);
    out.top_logprobs.assign(I.host_top_logprobs_out, I.host_top_logprobs_out + entries);
  }
  if (st.return_logits) {
    // Row r of the output holds the logits of the first sample that reads row r.
    const size_t v = d.vocab;
    out.logits.assign(act_row_of_logit_row.size() * v, 0.0f);
    std::vector<bool> done(act_row_of_logit_row.size(), false);
    for (int k = 0; k < num_samples; ++k) {
      const int32_t r = st.sample_rows[k];
      if (done[r]) continue;
      done[r] = true;
      KVC_TRY(
          cudaMemcpy(out.logits.data() + r * v, I.logits + k * v, v * 4, cudaMemcpyDeviceToHost),
          "logits copy");
    }
  }
  return {};
}

}  // namespace kvc::kernels::cuda
