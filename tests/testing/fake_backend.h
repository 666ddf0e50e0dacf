// A Backend without a model, for scheduler and engine tests. Its "KV" at each slot is the token
// and position written there; a sequence's logits are a hash of the context it reads back through
// the block tables and the cascade plan. So outputs are a pure function of each sequence's true
// context if, and only if, the engine's KV bookkeeping (prefix cache, forks, copy-on-write,
// preemption, cascade plans, the host tier's transfers) is right: tests compare outputs across
// pool sizes and attention modes. It also checks that every context reads back positions 0, 1,
// 2, ... in order.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "replica/backend/backend.h"

namespace kvc::testing {

class FakeBackend final : public Backend {
 public:
  // num_host_blocks: a host tier of that many slots (their "KV" too).
  FakeBackend(ModelConfig config, int32_t num_blocks, int32_t block_size,
              int32_t num_host_blocks = 0)
      : config_(std::move(config)),
        num_blocks_(num_blocks),
        block_size_(block_size),
        num_host_blocks_(num_host_blocks),
        token_(static_cast<size_t>(num_blocks) * block_size, -1),
        pos_(static_cast<size_t>(num_blocks) * block_size, -1),
        host_token_(static_cast<size_t>(num_host_blocks) * block_size, -1),
        host_pos_(static_cast<size_t>(num_host_blocks) * block_size, -1) {}

  const ModelConfig& config() const override { return config_; }
  int32_t num_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return block_size_; }
  int32_t num_host_blocks() const override { return num_host_blocks_; }
  std::string name() const override { return "fake"; }
  int32_t kv_bytes_per_element() const override { return 4; }

  int64_t num_forward_calls() const { return calls_; }
  // The next forward call fails (the engine must end that batch's groups and keep the rest).
  void fail_next_forward() { fail_next_ = true; }
  int64_t num_node_reads() const { return node_reads_; }  // sequences served by cascade nodes

  Status forward(const ForwardBatch& batch, ForwardOutput& out) override {
    std::vector<float>& logits = out.logits;
    ++calls_;
    if (fail_next_) {
      fail_next_ = false;
      return Error{"injected device failure"};
    }
    // One block's slots from (tokens, positions) block `src` to block `dst`.
    auto move = [&](std::vector<int32_t>& dt, std::vector<int32_t>& dp, int32_t dst,
                    const std::vector<int32_t>& st, const std::vector<int32_t>& sp, int32_t src) {
      for (int32_t i = 0; i < block_size_; ++i) {
        dt[dst * block_size_ + i] = st[src * block_size_ + i];
        dp[dst * block_size_ + i] = sp[src * block_size_ + i];
      }
    };
    auto check_slot = [&](int32_t s) {
      if (s < 0 || s >= num_host_blocks_) fail("host slot out of range");
    };
    for (const KvTransfer& t : batch.kv_moves) {
      check_block(t.block);
      switch (t.kind) {
        case KvTransfer::Kind::kOffload:
          check_slot(t.other);
          move(host_token_, host_pos_, t.other, token_, pos_, t.block);
          break;
        case KvTransfer::Kind::kLoad:
          check_slot(t.other);
          move(token_, pos_, t.block, host_token_, host_pos_, t.other);
          break;
        case KvTransfer::Kind::kCopy:
          check_block(t.other);
          move(token_, pos_, t.block, token_, pos_, t.other);
          break;
      }
    }
    logits.assign(static_cast<size_t>(batch.num_logit_rows()) * config_.vocab_size, 0.0f);
    int32_t row = 0;
    const PrefillBatch& pb = batch.prefill;
    for (int32_t c = 0; c < pb.num_chunks(); ++c) {
      auto slot = [&](int32_t p) {
        if (p / block_size_ >= pb.chunk_num_blocks(c)) fail("block table too short");
        return pb.chunk_blocks(c)[p / block_size_] * block_size_ + p % block_size_;
      };
      for (int32_t i = 0; i < pb.chunk_tokens(c); ++i) {
        const int32_t p = pb.start_pos[c] + i;
        write(slot(p), pb.tokens[pb.token_indptr[c] + i], p);
      }
      if (!pb.want_logits[c]) continue;
      uint64_t h = kSeed;
      const int32_t end = pb.start_pos[c] + pb.chunk_tokens(c);
      for (int32_t p = 0; p < end; ++p)
        h = read(slot(p), p, h);
      fill(h, logits.data() + static_cast<size_t>(row++) * config_.vocab_size);
    }
    const DecodeBatch& d = batch.decode;
    for (int32_t s = 0; s < d.size(); ++s)
      write(d.slots[s], d.tokens[s], d.positions[s]);
    const kernels::CascadePlan& plan = d.plan;
    std::vector<uint64_t> h(d.size(), kSeed);
    std::vector<int32_t> next(d.size(), 0);  // next position each sequence must read
    for (int32_t n = 0; n < plan.num_nodes(); ++n) {
      for (int32_t m = plan.node_seq_indptr[n]; m < plan.node_seq_indptr[n + 1]; ++m) {
        const int32_t s = plan.node_seq_indices[m];
        ++node_reads_;
        for (int32_t b = plan.node_block_indptr[n]; b < plan.node_block_indptr[n + 1]; ++b) {
          for (int32_t i = 0; i < block_size_; ++i) {
            h[s] = read(plan.node_block_indices[b] * block_size_ + i, next[s]++, h[s]);
          }
        }
      }
    }
    for (int32_t s = 0; s < d.size(); ++s) {
      const int32_t first = plan.suffix_block_indptr[s];
      for (int32_t i = 0; i < plan.suffix_len[s]; ++i) {
        h[s] = read(
            plan.suffix_block_indices.at(first + i / block_size_) * block_size_ + i % block_size_,
            next[s]++, h[s]);
      }
      if (next[s] != d.positions[s] + 1) fail("plan does not cover the context");
      fill(h[s], logits.data() + static_cast<size_t>(row++) * config_.vocab_size);
    }
    sample_on_host(batch, logits, config_.vocab_size, out.samples);
    return Status::Ok();
  }

 private:
  static constexpr uint64_t kSeed = 0x6b7663617363ull;
  bool fail_next_ = false;

  static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  }
  [[noreturn]] static void fail(const std::string& what) {
    throw std::logic_error("FakeBackend: " + what);
  }
  void check_block(int32_t b) const {
    if (b < 0 || b >= num_blocks_) fail("block id out of range");
  }
  void write(int32_t slot, int32_t token, int32_t pos) {
    if (slot < 0 || slot >= num_blocks_ * block_size_) fail("slot out of range");
    token_[slot] = token;
    pos_[slot] = pos;
  }
  uint64_t read(int32_t slot, int32_t expected_pos, uint64_t h) const {
    if (slot < 0 || slot >= num_blocks_ * block_size_) fail("slot out of range");
    if (pos_[slot] != expected_pos) {
      fail("slot " + std::to_string(slot) + " holds position " + std::to_string(pos_[slot]) +
           ", expected " + std::to_string(expected_pos));
    }
    return mix(h ^ static_cast<uint64_t>(token_[slot]));
  }
  // Varied logits; EOS (token 256) wins now and then so sequences end at different lengths.
  void fill(uint64_t h, float* out) const {
    for (int32_t t = 0; t < config_.vocab_size; ++t) {
      out[t] = static_cast<float>(mix(h + t) >> 40) / static_cast<float>(1 << 24) * 4.0f;
    }
    if (config_.vocab_size > 256 && mix(h) % 23 == 0) out[256] = 10.0f;
  }

  ModelConfig config_;
  int32_t num_blocks_, block_size_, num_host_blocks_;
  std::vector<int32_t> token_, pos_, host_token_, host_pos_;
  int64_t calls_ = 0, node_reads_ = 0;
};

}  // namespace kvc::testing
