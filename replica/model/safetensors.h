// The safetensors format (Hugging Face weights): an 8-byte little-endian header length N, N bytes
// of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then
// the tensor data (offsets relative to its start). The reader maps the file and checks every
// field before handing out a byte of it: a malformed file is an error value, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace kvc {

// The element types the engine reads. Other safetensors dtypes (I64, F64, F8_E5M2, ...) are
// accepted in a file but refused when asked for. F8_E4M3 holds FP8 checkpoints' codes
// (kernels/fp8_rule.h), whose scales are separate tensors (HfFolder applies them).
enum class DType { kF32, kF16, kBF16, kF8E4M3 };

const char* dtype_name(DType dtype);  // "F32", "F16", "BF16", "F8_E4M3"
int dtype_bytes(DType dtype);

// Scalar conversions (IEEE half; bfloat16 = the high half of a float32). The float -> 16-bit ones
// round to nearest even and keep inf/NaN.
float f16_to_float(uint16_t h);
float bf16_to_float(uint16_t b);
uint16_t float_to_f16(float f);
uint16_t float_to_bf16(float f);

// One tensor inside a mapped file; `bytes` stays valid while its SafetensorsFile lives.
struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;  // little-endian, possibly unaligned
  int64_t numel() const;
};

// The first element of `bytes` (little-endian elements of `dtype`, possibly unaligned; a trailing
// part of an element is ignored) that is NaN or infinite, or -1 when every one is finite. One
// vectorizable pass over the exponent bits: all ones in F32, F16 and BF16; E4M3 has no infinity,
// and its NaNs are the codes 0x7F and 0xFF.
int64_t first_non_finite(std::span<const std::byte> bytes, DType dtype);

// An error naming tensor `name` of file `path` when its `bytes` hold a NaN or an infinity
// (first_non_finite, over the CPU pool's threads): a checkpoint with one serves garbage (NaN
// logits) while looking healthy, so loaders refuse it.
Status check_finite_tensor(const std::string& path, const std::string& name,
                           std::span<const std::byte> bytes, DType dtype);

// The largest header accepted: a header is a table of contents, far below this even for 100k
// tensors; the limit keeps a corrupt length from turning into a huge JSON parse.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

// Part of a tensor along one dimension: elements [begin, begin + count) of dimension `dim` (the
// rows of a [rows, cols] matrix, or its columns), read as a contiguous row-major block. What a
// tensor-parallel rank reads of a checkpoint (replica/model/tensor_parallel.h).
struct TensorSlice {
  int dim = 0;
  int64_t begin = 0;
  int64_t count = 0;
};

class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // Every tensor in the file, sorted by name (including ones of unsupported dtypes).
  std::vector<std::string> tensor_names() const;
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Error when absent or of an unsupported dtype (the message names it).
  Result<TensorView> tensor(const std::string& name) const;

  // Converts tensor `name` (F32, F16 or BF16; F8_E4M3: the codes' values, unscaled) to float32
  // into out[0 .. numel), or only `slice` of it (out[0 .. numel / shape[dim] x count)).
  // Errors name the tensor: missing, unsupported dtype, a shape other than expected_shape, or a
  // NaN or infinity among the values read (checked as they are converted; `out` is then
  // written, but not to be used).
  // Precondition: a slice lies within the shape, on a tensor of at most two dimensions.
  Status read_f32(const std::string& name, const std::vector<int64_t>& expected_shape, float* out,
                  const std::optional<TensorSlice>& slice = std::nullopt) const;

 private:
  struct Mapping;  // the mmap of the whole file
  struct Entry {
    std::string dtype;         // as spelled in the file
    bool supported = false;    // dtype is one of DType
    DType type = DType::kF32;  // when supported
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte offsets into the data section
  };
  SafetensorsFile();
  Status parse_header(std::string_view header, uint64_t data_size);

  std::string path_;
  std::unique_ptr<Mapping> mapping_;
  std::map<std::string, Entry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// "[768, 256]"
std::string shape_string(const std::vector<int64_t>& shape);

struct NamedTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;  // numel * dtype_bytes, little-endian
};

// `values` (float32, numel of `shape`) stored as `dtype` (rounded to nearest even; F8_E4M3
// saturates at ±448).
NamedTensor make_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                        std::span<const float> values);

// Writes tensors in the given order (names must be distinct), the header padded to a multiple of
// 8 bytes as the reference writer does.
Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace kvc
