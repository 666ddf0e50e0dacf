#include "replica/backend/cuda/tensor_parallel_backend.h"

#include <algorithm>
#include <numeric>

#include "kernels/cuda/llama.h"
#include "kernels/cuda/nccl_group.h"
#include "replica/model/tensor_parallel.h"

namespace kvc {

namespace kc = kernels::cuda;

CudaTensorParallelBackend::CudaTensorParallelBackend(ModelConfig whole, int32_t size)
    : config_(std::move(whole)),
      ranks_(static_cast<size_t>(size)),
      outputs_(static_cast<size_t>(size)),
      threads_(std::make_unique<RankThreads>(size, /*caller_runs_first=*/false)) {}

CudaTensorParallelBackend::~CudaTensorParallelBackend() {
  // Each rank's model and communicator go on the thread its device is current on.
  (void)threads_->run([&](int32_t r) {
    ranks_[static_cast<size_t>(r)].reset();
    if (static_cast<size_t>(r) < comms_.size()) comms_[static_cast<size_t>(r)].reset();
    return Status::Ok();
  });
}

Result<std::unique_ptr<CudaTensorParallelBackend>> CudaTensorParallelBackend::make(
    const ModelConfig& whole, int32_t size, const CudaBackendOptions& o) {
  if (Status s = check_tensor_parallel(whole, size); !s.ok()) return Error{s.message()};
  std::vector<int> devices(static_cast<size_t>(size));
  std::iota(devices.begin(), devices.end(), 0);
  auto group = kc::make_nccl_group(devices);
  if (!group.ok())
    return Error{"--tensor-parallel-size " + std::to_string(size) + ": " + group.error().message};
  std::unique_ptr<CudaTensorParallelBackend> b(new CudaTensorParallelBackend(whole, size));
  b->comms_ = std::move(group).value();
  Status made = b->threads_->run([&](int32_t r) -> Status {
    kc::NcclComm& comm = *b->comms_[static_cast<size_t>(r)];
    if (Status s = comm.bind_thread(); !s.ok()) return s;
    auto rank = CudaBackend::create_rank(whole, comm, o);
    if (!rank.ok()) return Error{rank.error().message};
    b->ranks_[static_cast<size_t>(r)] = std::move(rank).value();
    return Status::Ok();
  });
  if (!made.ok()) return Error{made.message()};
  b->num_blocks_ = b->ranks_[0]->num_blocks();
  for (const auto& rank : b->ranks_)
    b->num_blocks_ = std::min(b->num_blocks_, rank->num_blocks());
  return b;
}

Result<std::unique_ptr<CudaTensorParallelBackend>> CudaTensorParallelBackend::create(
    const ModelConfig& whole, const ModelWeights* weights, int32_t size,
    const CudaBackendOptions& o) {
  if (weights != nullptr) {
    if (Status s = check_weight_shapes(*weights); !s.ok()) return Error{s.message()};
  }
  auto made = make(whole, size, o);
  if (!made.ok()) return made;
  CudaTensorParallelBackend& b = **made;
  // Random: weights_seed on every rank (the replicated embedding and norms alike; not a slice of
  // the one-GPU random model).
  Status filled = b.threads_->run([&](int32_t r) -> Status {
    CudaBackend& rank = *b.ranks_[static_cast<size_t>(r)];
    if (weights != nullptr) return rank.upload_rank(shard_weights(*weights, r, size));
    return rank.model().random_init(o.weights_seed);
  });
  if (!filled.ok()) return Error{filled.message()};
  return made;
}

Result<std::unique_ptr<CudaTensorParallelBackend>> CudaTensorParallelBackend::load(
    const std::string& folder, int32_t size, const CudaBackendOptions& o) {
  Result<HfFolder> f = HfFolder::open(folder);
  if (!f.ok()) return Error{f.error().message};
  // Uploads go from the mapping to the devices unconverted: their values are checked here.
  if (Status s = f->check_finite(); !s.ok()) return Error{s.message()};
  auto made = make(f->config(), size, o);
  if (!made.ok()) return made;
  if (Status s = (*made)->upload_folder(*f); !s.ok()) return Error{s.message()};
  return made;
}

Status CudaTensorParallelBackend::upload_folder(const HfFolder& f) {
  const int32_t size = threads_->size();
  return threads_->run([&](int32_t r) -> Status {
    return ranks_[static_cast<size_t>(r)]->upload_rank_folder(f, r, size);
  });
}

Status CudaTensorParallelBackend::forward(const ForwardBatch& batch, ForwardOutput& out) {
  if (!weights_broken_.empty()) return Error{weights_broken_};
  if (!group_failed_.empty()) return Error{group_failed_};
  // Every rank runs the same batch and the same collectives. A rank that fails alone (out of
  // device memory for a plan, an NCCL error) would leave the others waiting in a collective
  // for it: it aborts the group, which turns their waits into errors, and the replica stops
  // stepping (a restart rebuilds the group).
  Status s = threads_->run(
      [&](int32_t r) {
        return ranks_[static_cast<size_t>(r)]->forward(batch, outputs_[static_cast<size_t>(r)]);
      },
      [this] { abort_group(); });
  if (!s.ok()) {
    return finish_abort("the tensor-parallel group failed in a step (" + s.message() +
                        ") and was aborted: restart the replica");
  }
  std::swap(out, outputs_[0]);
  return Status::Ok();
}

Status CudaTensorParallelBackend::check_weights(const std::string& folder) const {
  return check_replacement(folder, config_);
}

Status CudaTensorParallelBackend::load_weights(const std::string& folder) {
  Result<HfFolder> f = open_replacement(folder, config_);
  if (!f.ok()) return Error{f.error().message};
  // A NaN or infinity is refused before the upload writes any weight: the old ones keep serving.
  if (Status s = f->check_finite(); !s.ok()) return s;
  return note_weights_written(upload_folder(*f), weights_broken_);
}

void CudaTensorParallelBackend::set_graphs(bool on) {
  (void)threads_->run([&](int32_t r) {
    ranks_[static_cast<size_t>(r)]->set_graphs(on);
    return Status::Ok();
  });
}

void CudaTensorParallelBackend::set_profile(bool on) {
  (void)threads_->run([&](int32_t r) {
    ranks_[static_cast<size_t>(r)]->set_profile(on);
    return Status::Ok();
  });
}

void CudaTensorParallelBackend::abort_group() {
  std::lock_guard lock(abort_mu_);
  if (aborted_) return;
  aborted_ = true;
  for (const auto& comm : comms_)
    comm->end_votes();
  for (const auto& comm : comms_)
    aborting_.emplace_back([c = comm.get()] { c->abort(); });
}

Status CudaTensorParallelBackend::finish_abort(const std::string& why) {
  (void)threads_->run([&](int32_t r) {
    ranks_[static_cast<size_t>(r)]->set_graphs(false);
    return Status::Ok();
  });
  {
    std::lock_guard lock(abort_mu_);
    for (std::thread& t : aborting_)
      t.join();
    aborting_.clear();
  }
  group_failed_ = why;
  return Error{group_failed_};
}

Result<double> CudaTensorParallelBackend::all_reduce_seconds(size_t bytes, int iters) {
  if (!group_failed_.empty()) return Error{group_failed_};
  if (bytes < 2 || iters < 1) return Error{"all_reduce_seconds: nothing to time"};
  const int32_t n = tensor_parallel_size();
  std::vector<double> seconds(static_cast<size_t>(n), 0.0);
  Status s = threads_->run(
      [&](int32_t r) -> Status {
        Result<double> t = comms_[static_cast<size_t>(r)]->time_all_reduce_bf16(bytes / 2, iters);
        if (!t.ok()) return Error{t.error().message};
        seconds[static_cast<size_t>(r)] = *t;
        return Status::Ok();
      },
      [this] { abort_group(); });  // the others may wait for a failed rank in a collective
  if (!s.ok()) {
    return Error{finish_abort("the tensor-parallel group failed timing an all-reduce (" +
                              s.message() + ") and was aborted: restart the replica")
                     .message()};
  }
  return seconds[0];
}

}  // namespace kvc
