#include "replica/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "kernels/cpu/parallel.h"
#include "kernels/fp8_rule.h"

namespace kvc {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF8E4M3:
      return "F8_E4M3";
  }
  return "?";
}

int dtype_bytes(DType dtype) {
  return dtype == DType::kF32 ? 4 : dtype == DType::kF8E4M3 ? 1 : 2;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in float
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  const uint32_t bits = exp == 0x1f ? (sign | 0x7f800000 | (mant << 13))  // inf, NaN
                                    : (sign | ((exp + 112) << 23) | (mant << 13));
  return std::bit_cast<float>(bits);
}

float bf16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

uint16_t float_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00 | ((abs >> 13) & 0x3ff);  // NaN stays NaN
  // From 65520 (halfway above the largest half, 65504) up: rounds to infinity.
  if (abs >= 0x477ff000) return sign | 0x7c00;
  if (abs < 0x38800000) {
    // Below the smallest normal half (2^-14): a subnormal count of 2^-24, rounded to nearest even
    // by the default rounding mode; 1024 is correctly the smallest normal.
    const float v = std::bit_cast<float>(abs) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(v));
  }
  uint32_t m = abs - (112u << 23);  // rebias the exponent from 127 to 15
  m += 0xfff + ((m >> 13) & 1);     // round the 13 dropped bits to nearest even
  return sign | static_cast<uint16_t>(m >> 13);
}

uint16_t float_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

namespace {

// first_non_finite over n words of type Word at p: an element is NaN or infinite when every bit
// of `mask` (its exponent; E4M3: exponent and mantissa) is set. Blocks are tested with a
// branch-free reduction (vectorized), and only a block that has one is searched for it.
template <typename Word>
int64_t first_with_mask(const std::byte* p, int64_t n, Word mask) {
  constexpr int64_t kBlock = 4096;
  auto word = [p](int64_t i) {
    Word w;
    std::memcpy(&w, p + i * static_cast<int64_t>(sizeof(Word)), sizeof(Word));  // may be unaligned
    return w;
  };
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    unsigned any = 0;
    for (int64_t i = b; i < end; ++i)
      any |= static_cast<unsigned>((word(i) & mask) == mask);
    if (any == 0) continue;
    for (int64_t i = b; i < end; ++i)
      if ((word(i) & mask) == mask) return i;
  }
  return -1;
}

std::string non_finite_error(const std::string& path, const std::string& name, int64_t element,
                             int64_t numel) {
  return path + ": tensor '" + name + "' holds NaN or infinite values (the first at element " +
         std::to_string(element) + " of " + std::to_string(numel) +
         "): a checkpoint that would serve NaN logits is refused";
}

}  // namespace

int64_t first_non_finite(std::span<const std::byte> bytes, DType dtype) {
  const int64_t n = static_cast<int64_t>(bytes.size()) / dtype_bytes(dtype);
  switch (dtype) {
    case DType::kF32:
      return first_with_mask<uint32_t>(bytes.data(), n, 0x7f800000u);
    case DType::kF16:
      return first_with_mask<uint16_t>(bytes.data(), n, 0x7c00u);
    case DType::kBF16:
      return first_with_mask<uint16_t>(bytes.data(), n, 0x7f80u);
    case DType::kF8E4M3:
      return first_with_mask<uint8_t>(bytes.data(), n, 0x7fu);
  }
  return -1;
}

namespace {

// first = min(first, at), for threads that each find their own first non-finite element.
void lower_to(std::atomic<int64_t>& first, int64_t at) {
  int64_t seen = first.load(std::memory_order_relaxed);
  while (at < seen && !first.compare_exchange_weak(seen, at, std::memory_order_relaxed)) {
  }
}

}  // namespace

Status check_finite_tensor(const std::string& path, const std::string& name,
                           std::span<const std::byte> bytes, DType dtype) {
  const size_t size = static_cast<size_t>(dtype_bytes(dtype));
  const auto n = static_cast<int64_t>(bytes.size() / size);
  std::atomic<int64_t> first{n};
  kernels::cpu::parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        const int64_t at = first_non_finite(bytes.subspan(static_cast<size_t>(begin) * size,
                                                          static_cast<size_t>(end - begin) * size),
                                            dtype);
        if (at >= 0) lower_to(first, begin + at);
      },
      /*min_chunk=*/int64_t{1} << 18);
  if (first.load() == n) return Status::Ok();
  return Error{non_finite_error(path, name, first.load(), n)};
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

// Element size of every dtype the safetensors format defines; 0 for an unknown name.
int known_dtype_bytes(const std::string& name) {
  static const std::pair<const char*, int> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  for (const auto& [n, size] : kSizes) {
    if (name == n) return size;
  }
  return 0;
}

bool supported_dtype(const std::string& name, DType& out) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3}) {
    if (name == dtype_name(d)) {
      out = d;
      return true;
    }
  }
  return false;
}

// A JSON value that is a non-negative integer (nlohmann stores those as unsigned).
bool get_size(const nlohmann::json& v, uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return true;
}

std::string errno_message() {
  return std::strerror(errno);
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  const std::byte* data = nullptr;  // start of the data section
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

SafetensorsFile::SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto fail = [&](const std::string& message) { return Error{path + ": " + message}; };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(errno_message());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = errno_message();
    ::close(fd);
    return fail(why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return fail("truncated: " + std::to_string(size) +
                " bytes, shorter than the 8-byte header length");
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const std::string mmap_error = addr == MAP_FAILED ? errno_message() : "";
  ::close(fd);
  if (addr == MAP_FAILED) return fail("mmap: " + mmap_error);

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = std::make_unique<Mapping>();
  file.mapping_->addr = addr;
  file.mapping_->size = size;
  const auto* base = static_cast<const std::byte*>(addr);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return fail("header length " + std::to_string(header_len) + " exceeds the limit of " +
                std::to_string(kSafetensorsMaxHeaderBytes) + " bytes (corrupt file?)");
  }
  if (header_len > size - 8) {
    return fail("header length " + std::to_string(header_len) + " exceeds the file (" +
                std::to_string(size) + " bytes; truncated?)");
  }
  file.mapping_->data = base + 8 + header_len;
  const std::string_view header(reinterpret_cast<const char*>(base + 8), header_len);
  if (Status s = file.parse_header(header, size - 8 - header_len); !s.ok()) {
    return fail(s.message());
  }
  return file;
}

Status SafetensorsFile::parse_header(std::string_view header, uint64_t data_size) {
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error{"header is not valid JSON"};
  if (!j.is_object()) return Error{"header is not a JSON object"};
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return Error{"__metadata__ is not an object"};
      for (const auto& [key, value] : v.items()) {
        if (!value.is_string()) return Error{"__metadata__ '" + key + "' is not a string"};
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!v.is_object()) return Error{where + "entry is not an object"};
    Entry e;
    const auto dtype = v.find("dtype");
    if (dtype == v.end() || !dtype->is_string()) return Error{where + "missing dtype"};
    e.dtype = dtype->get<std::string>();
    const int elem_bytes = known_dtype_bytes(e.dtype);
    if (elem_bytes == 0) return Error{where + "unknown dtype '" + e.dtype + "'"};
    e.supported = supported_dtype(e.dtype, e.type);

    const auto shape = v.find("shape");
    if (shape == v.end() || !shape->is_array()) return Error{where + "missing shape"};
    // The product of the non-zero dims must fit in int64, not just numel: a zero dim would
    // otherwise hide [2^62, 2, 0], whose numel() (int64, in order) overflows before reaching 0.
    uint64_t nonzero_product = 1;
    bool has_zero_dim = false;
    for (const auto& dim : *shape) {
      uint64_t d = 0;
      if (!get_size(dim, d)) return Error{where + "shape must hold non-negative integers"};
      if (d == 0) {
        has_zero_dim = true;
      } else if (__builtin_mul_overflow(nonzero_product, d, &nonzero_product) ||
                 nonzero_product > uint64_t{INT64_MAX}) {
        return Error{where + "shape too large"};
      }
      e.shape.push_back(static_cast<int64_t>(d));
    }
    const uint64_t numel = has_zero_dim ? 0 : nonzero_product;
    uint64_t num_bytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(elem_bytes), &num_bytes)) {
      return Error{where + "shape too large"};
    }

    const auto offsets = v.find("data_offsets");
    if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2 ||
        !get_size((*offsets)[0], e.begin) || !get_size((*offsets)[1], e.end)) {
      return Error{where + "data_offsets must be [begin, end], non-negative integers"};
    }
    const std::string range =
        "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) return Error{where + range + ": begin after end"};
    if (e.end > data_size) {
      return Error{where + range + " beyond the data section (" + std::to_string(data_size) +
                   " bytes; truncated?)"};
    }
    if (e.end - e.begin != num_bytes) {
      return Error{where + range + " hold " + std::to_string(e.end - e.begin) + " bytes, but " +
                   e.dtype + " " + shape_string(e.shape) + " needs " + std::to_string(num_bytes)};
    }
    tensors_.emplace(name, std::move(e));
  }

  // No two tensors may share a byte (holes are tolerated).
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
  for (const auto& [name, e] : tensors_) {
    if (e.end > e.begin) spans.emplace_back(e.begin, e.end, &name);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (std::get<0>(spans[i]) < std::get<1>(spans[i - 1])) {
      return Error{"tensors '" + *std::get<2>(spans[i - 1]) + "' and '" + *std::get<2>(spans[i]) +
                   "' overlap"};
    }
  }
  return Status::Ok();
}

std::vector<std::string> SafetensorsFile::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, e] : tensors_)
    names.push_back(name);
  return names;
}

Result<TensorView> SafetensorsFile::tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) return Error{path_ + ": no tensor '" + name + "'"};
  const Entry& e = it->second;
  if (!e.supported) {
    return Error{path_ + ": tensor '" + name + "' has dtype " + e.dtype +
                 " (supported: F32, F16, BF16, F8_E4M3)"};
  }
  return TensorView{e.type, e.shape,
                    std::span<const std::byte>(mapping_->data + e.begin, e.end - e.begin)};
}

Status SafetensorsFile::read_f32(const std::string& name,
                                 const std::vector<int64_t>& expected_shape, float* out,
                                 const std::optional<TensorSlice>& slice) const {
  Result<TensorView> t = tensor(name);
  if (!t.ok()) return Error{t.error().message};
  if (t->shape != expected_shape) {
    return Error{name + ": shape " + shape_string(t->shape) + " in file, expected " +
                 shape_string(expected_shape) + " (" + path_ + ")"};
  }
  const std::byte* src = t->bytes.data();
  const DType type = t->dtype;
  float fp8_values[256];
  for (int c = 0; c < 256 && type == DType::kF8E4M3; ++c)
    fp8_values[c] = kernels::fp8::e4m3_to_float(static_cast<uint8_t>(c));
  // The first element of the file's tensor found NaN or infinite (numel: none).
  const int64_t numel = t->numel();
  std::atomic<int64_t> non_finite{numel};
  // Elements [from, from + n) of the file's tensor into out[0, n), each piece checked for NaN
  // and infinity (first_non_finite on the floats) while it is in cache.
  auto convert_piece = [&](int64_t from, int64_t n, float* to) {
    if (type == DType::kF32) {
      std::memcpy(to, src + from * 4, n * 4);  // src may be unaligned
    } else if (type == DType::kF8E4M3) {
      for (int64_t i = 0; i < n; ++i)
        to[i] = fp8_values[static_cast<uint8_t>(src[from + i])];
    } else {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + (from + i) * 2, 2);
        to[i] = type == DType::kF16 ? f16_to_float(bits) : bf16_to_float(bits);
      }
    }
    const int64_t at = first_non_finite(
        std::as_bytes(std::span<const float>(to, static_cast<size_t>(n))), DType::kF32);
    if (at >= 0) lower_to(non_finite, from + at);
  };
  auto convert = [&](int64_t from, int64_t n, float* to) {
    constexpr int64_t kPiece = int64_t{1} << 14;
    for (int64_t done = 0; done < n; done += kPiece)
      convert_piece(from + done, std::min(kPiece, n - done), to + done);
  };
  // The block as runs: `runs` runs of `run` elements, run i from file element first + i x stride.
  int64_t runs = 1, run = t->numel(), first = 0, stride = 0;
  if (slice) {
    assert(t->shape.size() <= 2 && slice->dim >= 0 &&
           slice->dim < static_cast<int>(t->shape.size()) && slice->begin >= 0 &&
           slice->count >= 0 && slice->begin + slice->count <= t->shape[slice->dim]);
    const int64_t cols = t->shape.size() == 2 ? t->shape[1] : 1;
    if (slice->dim == 0) {
      first = slice->begin * cols, run = slice->count * cols;
    } else {
      runs = t->shape[0], run = slice->count, first = slice->begin, stride = cols;
    }
  }
  // Converted in parallel: loading a multi-GB checkpoint is otherwise bound by one core.
  if (runs == 1) {
    kernels::cpu::parallel_for(
        run, [&](int64_t begin, int64_t end) { convert(first + begin, end - begin, out + begin); },
        /*min_chunk=*/int64_t{1} << 16);
  } else {
    kernels::cpu::parallel_for(
        runs,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r)
            convert(first + r * stride, run, out + r * run);
        },
        /*min_chunk=*/std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(run, 1)));
  }
  if (const int64_t at = non_finite.load(); at < numel) {
    return Error{non_finite_error(path_, name, at, numel)};
  }
  return Status::Ok();
}

NamedTensor make_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                        std::span<const float> values) {
  NamedTensor t{std::move(name), dtype, std::move(shape), {}};
  int64_t numel = 1;
  for (int64_t d : t.shape)
    numel *= d;
  assert(static_cast<int64_t>(values.size()) == numel);
  (void)numel;
  t.bytes.resize(values.size() * dtype_bytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(t.bytes.data() + i * 4, &values[i], 4);
    } else if (dtype == DType::kF8E4M3) {
      t.bytes[i] = static_cast<std::byte>(kernels::fp8::e4m3_from_float(values[i]));
    } else {
      const uint16_t bits =
          dtype == DType::kF16 ? float_to_f16(values[i]) : float_to_bf16(values[i]);
      std::memcpy(t.bytes.data() + i * 2, &bits, 2);
    }
  }
  return t;
}

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) {
      return Error{path + ": duplicate or reserved tensor name '" + t.name + "'"};
    }
    int64_t numel = 1;
    for (int64_t d : t.shape)
      numel *= d;
    if (static_cast<int64_t>(t.bytes.size()) != numel * dtype_bytes(t.dtype)) {
      return Error{path + ": tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                   " bytes, " + dtype_name(t.dtype) + " " + shape_string(t.shape) + " needs " +
                   std::to_string(numel * dtype_bytes(t.dtype))};
    }
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t header_len = text.size();

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error{path + ": cannot open for writing: " + errno_message()};
  out.write(reinterpret_cast<const char*>(&header_len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const NamedTensor& t : tensors) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()),
              static_cast<std::streamsize>(t.bytes.size()));
  }
  out.close();
  if (!out) return Error{path + ": write failed"};
  return Status::Ok();
}

}  // namespace kvc
