#include "kernels/cuda/device.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include <cuda_runtime.h>

namespace kvc::kernels::cuda {
namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(err));
    std::abort();
  }
}

}  // namespace

bool device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

std::string device_description() {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return std::string("no CUDA device: ") +
           (err != cudaSuccess ? cudaGetErrorString(err) : "count is 0");
  }
  int device = 0;  // the calling thread's (a tensor-parallel rank's thread: its own GPU)
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    device = 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1ull << 30));
  return buf;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  check(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice),
        "upload");
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  check(cudaMemcpy(host, static_cast<const char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost),
        "download");
}

void DeviceBuffer::fill_bytes(int value) {
  check(cudaMemset(ptr_, value, bytes_), "memset");
}

void synchronize_or_die(const char* what) {
  check(cudaDeviceSynchronize(), what);
}

}  // namespace kvc::kernels::cuda
