// NCCL for tensor parallelism over the GPUs of one host (one process, a thread per GPU;
// docs/architecture.md "Tensor parallelism"), without CUDA or NCCL types in this header.
//
// NCCL is loaded at run time (dlopen of libnccl.so.2): the toolkit's library (218 MB) is not
// linked, so the binaries run on hosts without it until a split is asked for, and then the error
// says which library was missing and where it was looked for (KVC_NCCL_LIBRARY names another
// file; on the GPU host PyTorch's nvidia-nccl package has one: bench/gpu_tp.sh). NVLink
// multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 is set before NCCL starts unless the
// environment already says otherwise, and nothing here creates multicast objects.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/cuda/group_vote.h"

namespace kvc::kernels::cuda {

// One rank's communicator of a group; each is used by one thread (its rank's), and every rank
// calls the same collectives in the same order. The collectives are enqueued on `stream` (a
// cudaStream_t of the rank's device) and may be captured into a CUDA graph.
class NcclComm {
 public:
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  // Makes the rank's device the calling thread's current one (each rank thread calls it first).
  Status bind_thread() const;

  // In place: data[0, count) (bf16) becomes the sum over the ranks of theirs.
  Status all_reduce_bf16(void* data, size_t count, void* stream);
  // out[r * count, (r + 1) * count) (float32) becomes rank r's in[0, count), on every rank.
  Status all_gather_f32(const void* in, size_t count, void* out, void* stream);
  // Seconds one all-reduce of `count` bf16 values takes, the median of `iters` timed on a
  // stream of its own after two untimed (benchmarks: every rank calls it at once, between
  // steps; it allocates and frees its buffer).
  Result<double> time_all_reduce_bf16(size_t count, int iters);
  // A host-side vote of the group's rank threads (GroupVote): blocks until every rank called it
  // this round; true iff all passed `value`. False once the group was aborted.
  bool all_agree(int64_t value) { return vote_->agree(value); }
  // Ends the group's votes at once: every rank waiting in all_agree, and every later call,
  // gets false (the first step of aborting a group: abort() does it too).
  void end_votes() { vote_->abort(); }
  // Ends the communicator, from any thread (ncclCommAbort): a rank blocked in one of its
  // collectives (or in a stream wait behind one, or in all_agree) gets an error instead of
  // waiting for a peer that failed. The communicator is unusable afterwards (its collectives
  // return errors, its votes false). NCCL sets the abort flag at once but returns only when
  // every CUDA graph that captured this communicator's collectives has been destroyed (NCCL >=
  // 2.26): with graphs alive, call it from a thread of its own while the rank drops them
  // (CudaTensorParallelBackend::abort_group).
  void abort();

 private:
  friend Result<std::vector<std::unique_ptr<NcclComm>>> make_nccl_group(std::span<const int>);
  NcclComm(void* comm, int rank, int size, int device, std::shared_ptr<GroupVote> vote)
      : comm_(comm), rank_(rank), size_(size), device_(device), vote_(std::move(vote)) {}
  std::atomic<void*> comm_;  // ncclComm_t; null once aborted
  int rank_, size_, device_;
  std::shared_ptr<GroupVote> vote_;  // the group's, shared by its ranks
};

// A group of devices.size() ranks, rank i on CUDA device devices[i] (ncclCommInitAll). Errors
// name what failed: NCCL not found, a device that does not exist (or appears twice), NCCL's own
// initialisation.
Result<std::vector<std::unique_ptr<NcclComm>>> make_nccl_group(std::span<const int> devices);

// CUDA devices this process sees (0 without a driver).
int device_count();

// "NCCL 2.28.9 (libnccl.so.2)", or why it cannot be loaded.
std::string nccl_description();

}  // namespace kvc::kernels::cuda
