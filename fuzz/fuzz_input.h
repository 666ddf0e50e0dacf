// Reads structured values out of a fuzzer's input bytes, front to back. Past the end every read
// gives zeros or empty strings, so any input decodes to something and a short input to a small
// case.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

// A property of the code under test that failed: crash loudly, in every build (asserts may be off).
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace kvc::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t remaining() const { return size_ - pos_; }

  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool flag() { return byte() & 1; }
  uint16_t u16() { return static_cast<uint16_t>(byte() | (byte() << 8)); }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t{byte()} << (8 * i);
    return v;
  }
  // In [0, n). Precondition: n > 0.
  size_t below(size_t n) { return byte() % n; }

  // A length byte, then up to that many bytes.
  std::string string(size_t max_len = 255) {
    const size_t len = std::min<size_t>(byte(), max_len);
    return bytes(len);
  }
  std::string bytes(size_t len) {
    len = std::min(len, remaining());
    std::string out(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return out;
  }
  std::string rest() { return bytes(remaining()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace kvc::fuzz
