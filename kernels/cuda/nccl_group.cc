#include "kernels/cuda/nccl_group.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>  // types and enums only: the functions come from dlopen

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace kvc::kernels::cuda {
namespace {

// The NCCL functions this file calls, from the library dlopen found.
struct NcclApi {
  void* handle = nullptr;
  std::string library;  // the file that was loaded
  std::string error;    // why none was (empty when loaded)
  int version = 0;
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                             cudaStream_t) = nullptr;
};

template <typename F>
bool bind(void* handle, const char* name, F*& out, std::string& error) {
  out = reinterpret_cast<F*>(dlsym(handle, name));
  if (out == nullptr) error = std::string("no symbol ") + name;
  return out != nullptr;
}

const NcclApi& nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    // Before NCCL reads its environment: no NVLink multicast (see the header).
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
    std::vector<std::string> names;
    if (const char* own = std::getenv("KVC_NCCL_LIBRARY"); own != nullptr && *own != '\0') {
      names.push_back(own);
    } else {
      names = {"libnccl.so.2", "libnccl.so"};
    }
    std::string tried;
    for (const std::string& name : names) {
      api.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (api.handle != nullptr) {
        api.library = name;
        break;
      }
      const char* why = dlerror();
      tried += (tried.empty() ? "" : "; ") + name + ": " + (why != nullptr ? why : "not found");
    }
    if (api.handle == nullptr) {
      api.error = "NCCL cannot be loaded (" + tried +
                  "): put libnccl.so.2 on the library path (LD_LIBRARY_PATH) or name it in "
                  "KVC_NCCL_LIBRARY";
      return;
    }
    std::string missing;
    const bool ok = bind(api.handle, "ncclGetVersion", api.get_version, missing) &&
                    bind(api.handle, "ncclCommInitAll", api.comm_init_all, missing) &&
                    bind(api.handle, "ncclCommDestroy", api.comm_destroy, missing) &&
                    bind(api.handle, "ncclCommAbort", api.comm_abort, missing) &&
                    bind(api.handle, "ncclGetErrorString", api.error_string, missing) &&
                    bind(api.handle, "ncclAllReduce", api.all_reduce, missing) &&
                    bind(api.handle, "ncclAllGather", api.all_gather, missing);
    if (!ok || api.get_version(&api.version) != ncclSuccess) {
      api.error = api.library + " is not a usable NCCL (" +
                  (missing.empty() ? "ncclGetVersion failed" : missing) + ")";
      api.handle = nullptr;
    }
  });
  return api;
}

Status nccl_status(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return Error{std::string(what) + ": " + nccl().error_string(r)};
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

std::string nccl_description() {
  const NcclApi& api = nccl();
  if (!api.error.empty()) return api.error;
  // NCCL's code: major * 10000 + minor * 100 + patch (since 2.9).
  return "NCCL " + std::to_string(api.version / 10000) + "." +
         std::to_string(api.version / 100 % 100) + "." + std::to_string(api.version % 100) + " (" +
         api.library + ")";
}

Result<std::vector<std::unique_ptr<NcclComm>>> make_nccl_group(std::span<const int> devices) {
  if (devices.empty()) return Error{"a tensor-parallel group needs at least one device"};
  const int visible = device_count();
  std::vector<int> seen(devices.begin(), devices.end());
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) {
    return Error{"a device appears twice in the tensor-parallel group"};
  }
  if (seen.front() < 0 || seen.back() >= visible) {
    return Error{"tensor parallelism over " + std::to_string(devices.size()) +
                 " GPUs, but this process sees " + std::to_string(visible)};
  }
  const NcclApi& api = nccl();
  if (!api.error.empty()) return Error{api.error};
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  if (Status s = nccl_status(
          api.comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()),
          "ncclCommInitAll");
      !s.ok()) {
    return Error{s.message()};
  }
  std::vector<std::unique_ptr<NcclComm>> group;
  const int size = static_cast<int>(devices.size());
  auto vote = std::make_shared<GroupVote>(size);
  for (size_t i = 0; i < devices.size(); ++i) {
    group.push_back(std::unique_ptr<NcclComm>(
        new NcclComm(comms[i], static_cast<int>(i), size, devices[i], vote)));
  }
  return group;
}

NcclComm::~NcclComm() {
  if (void* comm = comm_.load(); comm != nullptr) {
    (void)nccl().comm_destroy(static_cast<ncclComm_t>(comm));
  }
}

void NcclComm::abort() {
  vote_->abort();
  void* comm = comm_.exchange(nullptr);
  if (comm != nullptr) (void)nccl().comm_abort(static_cast<ncclComm_t>(comm));
}

Status NcclComm::bind_thread() const {
  const cudaError_t e = cudaSetDevice(device_);
  if (e == cudaSuccess) return Status::Ok();
  return Error{"device " + std::to_string(device_) + ": " + cudaGetErrorString(e)};
}

Status NcclComm::all_reduce_bf16(void* data, size_t count, void* stream) {
  void* comm = comm_.load();
  if (comm == nullptr) return Error{"the tensor-parallel group was aborted"};
  return nccl_status(
      nccl().all_reduce(data, data, count, ncclBfloat16, ncclSum, static_cast<ncclComm_t>(comm),
                        static_cast<cudaStream_t>(stream)),
      "ncclAllReduce");
}

Result<double> NcclComm::time_all_reduce_bf16(size_t count, int iters) {
  if (iters < 1 || count == 0) return Error{"time_all_reduce_bf16: nothing to time"};
  void* data = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t begin = nullptr, end = nullptr;
  std::vector<double> seconds;
  Status status = Status::Ok();
  auto cuda_ok = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess || !status.ok()) return status.ok();
    status = Error{std::string(what) + ": " + cudaGetErrorString(e)};
    return false;
  };
  if (cuda_ok(cudaMalloc(&data, count * 2), "cudaMalloc") &&
      cuda_ok(cudaMemset(data, 0, count * 2), "cudaMemset") &&
      cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream") &&
      cuda_ok(cudaEventCreate(&begin), "event") && cuda_ok(cudaEventCreate(&end), "event")) {
    for (int i = 0; i < iters + 2 && status.ok(); ++i) {
      if (!cuda_ok(cudaEventRecord(begin, stream), "event")) break;
      status = all_reduce_bf16(data, count, stream);
      if (!status.ok() || !cuda_ok(cudaEventRecord(end, stream), "event") ||
          !cuda_ok(cudaEventSynchronize(end), "all-reduce")) {
        break;
      }
      float ms = 0;
      if (!cuda_ok(cudaEventElapsedTime(&ms, begin, end), "event")) break;
      if (i >= 2) seconds.push_back(ms * 1e-3);
    }
  }
  if (end != nullptr) cudaEventDestroy(end);
  if (begin != nullptr) cudaEventDestroy(begin);
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (data != nullptr) cudaFree(data);
  if (!status.ok()) return Error{status.message()};
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

Status NcclComm::all_gather_f32(const void* in, size_t count, void* out, void* stream) {
  void* comm = comm_.load();
  if (comm == nullptr) return Error{"the tensor-parallel group was aborted"};
  return nccl_status(nccl().all_gather(in, out, count, ncclFloat32, static_cast<ncclComm_t>(comm),
                                       static_cast<cudaStream_t>(stream)),
                     "ncclAllGather");
}

}  // namespace kvc::kernels::cuda
