// Device plumbing for callers outside kernels/cuda (tests, benchmarks, the CUDA backend), without
// CUDA headers: kernels/cuda is the only folder that includes them.
#pragma once

#include <cstddef>
#include <string>

namespace kvc::kernels::cuda {

// True when a CUDA device is usable (false on machines without a GPU or driver).
bool device_available();
// "NVIDIA H200 (sm_90, 132 SMs)" of the calling thread's current device, or the reason none is
// available.
std::string device_description();

// Bytes on the device, freed on destruction. Move-only. Allocation failure aborts with a message
// (a benchmark or test setup bug, not a request-path condition).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t bytes, size_t offset = 0);
  void download(void* host, size_t bytes, size_t offset = 0) const;
  void fill_bytes(int value);  // e.g. 0xFF to poison outputs before a kernel test

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for the device; aborts with the error text if an earlier launch failed.
void synchronize_or_die(const char* what);

}  // namespace kvc::kernels::cuda
