// The CUDA backend split over GPUs (replica/backend/cuda/tensor_parallel_backend.h), against
// the one-GPU backend on the same weights: one rank through the whole split path (NCCL group,
// rank threads, all-reduces, the LM head's all-gather and vocab gather) gives the same logits to
// the bit in flat and cascade decode; over 2, 4 or 8 GPUs where the machine has them, the
// logits stay within bf16 rounding of the whole model's (the partial sums are added in bf16),
// every rank replaying its decode steps from CUDA graphs.
// A group of more ranks than GPUs is refused. bench/gpu_tp.sh runs these on the GPU host.
#include "replica/backend/cuda/tensor_parallel_backend.h"

#include <cstdlib>
#include <filesystem>

#include "kernels/cuda/llama.h"
#include "kernels/cuda/nccl_group.h"
#include "tests/replica/backend/cuda/cuda_backend_fixture.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

// The tiny preset with 4 KV heads (and 8 query heads) and an LM head of its own: it splits over
// 1, 2 and 4 ranks (the tiny preset, tied, over 1).
const ModelWeights& split_weights() {
  static const ModelWeights w = [] {
    ModelConfig c = *preset_config("tiny");
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.hidden_size = 512;
    c.intermediate_size = 1024;
    c.tie_word_embeddings = false;  // its own LM head: the split path uploads its rows
    ModelWeights r = random_weights(c, 7);
    round_to_bf16(r);
    return r;
  }();
  return w;
}

class CudaTensorParallelTest : public CudaBackendTest {
 protected:
  // The split backend over `size` GPUs, or null when NCCL cannot be loaded here (skipped unless
  // KVC_REQUIRE_NCCL=1).
  std::unique_ptr<CudaTensorParallelBackend> split(const ModelWeights& w, int32_t size) {
    CudaBackendOptions o;
    o.num_blocks = 512;
    auto b = CudaTensorParallelBackend::create(w.config, &w, size, o);
    if (!b.ok()) {
      const char* require = std::getenv("KVC_REQUIRE_NCCL");
      if (b.error().message.find("cannot be loaded") != std::string::npos &&
          (require == nullptr || std::string(require) != "1")) {
        skipped_ = b.error().message;
        return nullptr;
      }
      ADD_FAILURE() << b.error().message;
      return nullptr;
    }
    return std::unique_ptr<CudaTensorParallelBackend>(std::move(b).value());
  }
  std::string skipped_;
};

TEST_F(CudaTensorParallelTest, OneRankThroughTheSplitPathEqualsTheWholeModel) {
  for (const ModelWeights* w : {&weights(), &split_weights()}) {
    for (bool cascade : {false, true}) {
      SCOPED_TRACE(cascade ? "cascade" : "flat");
      auto one = split(*w, 1);
      if (!skipped_.empty()) GTEST_SKIP() << skipped_;
      ASSERT_TRUE(one);
      auto whole = cuda(512, 16, false, *w);
      ASSERT_TRUE(whole);
      const std::vector<GenerationRequest> reqs = sibling_requests(2);
      const RunOutput a = run(*whole, reqs, cascade, /*keep_logits=*/true);
      const RunOutput b = run(*one, reqs, cascade, /*keep_logits=*/true);
      EXPECT_EQ(a.tokens, b.tokens);
      EXPECT_EQ(a.logits, b.logits) << "the split path with one rank changed a logit";
    }
  }
}

TEST_F(CudaTensorParallelTest, SplitOverTheGpusStaysWithinBf16OfTheWholeModel) {
  const int gpus = kernels::cuda::device_count();
  if (gpus < 2) GTEST_SKIP() << "one GPU: the split over several runs on a multi-GPU machine";
  const std::vector<GenerationRequest> reqs = twin_requests();
  for (int32_t size : {2, 4}) {
    if (size > gpus) break;
    for (bool cascade : {false, true}) {
      SCOPED_TRACE("tp " + std::to_string(size) + (cascade ? " cascade" : " flat"));
      auto whole = cuda(512, 16, false, split_weights());
      auto parts = split(split_weights(), size);
      if (!skipped_.empty()) GTEST_SKIP() << skipped_;
      ASSERT_TRUE(whole && parts);
      const RunOutput a = run(*whole, reqs, cascade, /*keep_logits=*/true);
      const RunOutput b = run(*parts, reqs, cascade, /*keep_logits=*/true);
      const auto [compared, worst] = expect_logits_close(a, b, reqs, 2e-2);
      std::printf("tp %d %s: %d logit rows against one GPU, worst relative L2 %.3g\n", size,
                  cascade ? "cascade" : "flat", compared, worst);
      EXPECT_GE(compared, 5);
      // The ranks replayed their decode steps from CUDA graphs, collectives included, together.
      for (int32_t r = 0; r < size; ++r) {
        const auto g = parts->rank(r).model().graph_stats();
        EXPECT_EQ(g.disabled, "") << "rank " << r;
        EXPECT_GT(g.replays, g.captures) << "rank " << r;
      }
    }
  }
}

// A checkpoint streamed onto every rank (CudaTensorParallelBackend::load: each rank's slices
// from the mapped bf16 tensors, upload_rank_folder) computes what the ranks given the same
// model's slices in memory compute (shard_weights), bit for bit: over one GPU (and with one rank
// what the one-GPU backend loaded from the folder computes), and over 2 where there are GPUs.
// A weight update takes the same path.
TEST_F(CudaTensorParallelTest, AFolderStreamsEachRanksSlicesOntoItsGpu) {
  testing::TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(write_hf_checkpoint(split_weights(), dir).ok());
  Result<HfFolder> f = HfFolder::open(dir);
  ASSERT_TRUE(f.ok()) << f.error().message;
  Result<ModelWeights> read = read_weights(*f);
  ASSERT_TRUE(read.ok()) << read.error().message;
  const std::vector<GenerationRequest> reqs = sibling_requests(2);
  const int gpus = kernels::cuda::device_count();
  for (int32_t size : {1, 2}) {
    if (size > gpus) break;
    SCOPED_TRACE("tp " + std::to_string(size));
    CudaBackendOptions o;
    o.num_blocks = 512;
    auto streamed = CudaTensorParallelBackend::load(dir, size, o);
    if (!streamed.ok() && streamed.error().message.find("cannot be loaded") != std::string::npos &&
        std::getenv("KVC_REQUIRE_NCCL") == nullptr) {
      GTEST_SKIP() << streamed.error().message;
    }
    ASSERT_TRUE(streamed.ok()) << streamed.error().message;
    auto sharded = split(*read, size);
    ASSERT_TRUE(sharded);
    const RunOutput a = run(**streamed, reqs, true, /*keep_logits=*/true);
    const RunOutput b = run(*sharded, reqs, true, /*keep_logits=*/true);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.logits, b.logits) << "a streamed slice differs from the sharded one";
    if (size == 1) {
      auto whole = CudaBackend::load(dir, o);
      ASSERT_TRUE(whole.ok()) << whole.error().message;
      EXPECT_EQ(run(**whole, reqs, true, /*keep_logits=*/true).logits, a.logits);
    }
    // An update with the same checkpoint streams the same values over them.
    ASSERT_TRUE((*streamed)->load_weights(dir).ok());
    EXPECT_EQ(run(**streamed, reqs, true, /*keep_logits=*/true).logits, a.logits);
  }
}

// A step that fails on a rank after the ranks captured CUDA graphs holding the group's
// collectives aborts the group and returns (NCCL >= 2.26 finishes ncclCommAbort only once those
// graphs are destroyed: aborting from the rank's own thread with its graphs alive would block
// for ever). Later steps are refused with the reason. One rank runs the path on one GPU; the
// block itself needs several ranks (with one, the old abort from the rank's own thread returned
// too, checked on an H100: the hang is not reproduced here).
TEST_F(CudaTensorParallelTest, AFailedStepAbortsTheGroupWithGraphsCaptured) {
  auto one = split(split_weights(), 1);
  if (!skipped_.empty()) GTEST_SKIP() << skipped_;
  ASSERT_TRUE(one);
  const std::vector<GenerationRequest> reqs = sibling_requests(2);
  (void)run(*one, reqs, true);
  ASSERT_GT(one->rank(0).model().graph_stats().cached, 0);  // graphs hold the collectives
  ForwardBatch bad;
  bad.samples.push_back(SampleRequest{.logits_row = 3});  // a row the step does not produce
  ForwardOutput out;
  const Status failed = one->forward(bad, out);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("aborted: restart the replica"), std::string::npos)
      << failed.message();
  EXPECT_EQ(one->rank(0).model().graph_stats().cached, 0) << "the graphs were dropped";
  const Status later = one->forward(ForwardBatch{}, out);
  EXPECT_EQ(later.message(), failed.message());
}

TEST_F(CudaTensorParallelTest, MoreRanksThanGpusIsRefused) {
  const int gpus = kernels::cuda::device_count();
  if (gpus >= 8) GTEST_SKIP() << "8 GPUs: nothing to refuse";
  CudaBackendOptions o;
  auto b = CudaTensorParallelBackend::create(*preset_config("llama3-8b"), nullptr, 8, o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("this process sees " + std::to_string(gpus)), std::string::npos)
      << b.error().message;
}

}  // namespace
}  // namespace kvc
