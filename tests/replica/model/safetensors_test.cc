// The safetensors reader and writer: round trips of F32/F16/BF16, the scalar conversions (exact
// bit patterns, exhaustive round trips), and malformed files, each a clear error and never a crash.
#include "replica/model/safetensors.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using ::testing::HasSubstr;

// A file of `header` preceded by `header_len` (default: its size), then `data_bytes` bytes 0..N.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
               std::optional<uint64_t> header_len = std::nullopt) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t len = header_len.value_or(header.size());
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header;
  for (size_t i = 0; i < data_bytes; ++i)
    out.put(static_cast<char>(i));
}

std::string open_error(const std::string& path) {
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  EXPECT_FALSE(f.ok()) << "opened a malformed file";
  return f.ok() ? "" : f.error().message;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(SafetensorsConversion, KnownBitPatterns) {
  EXPECT_EQ(f16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_float(0xc000), -2.0f);
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_float(0x83ff), -std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));

  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);  // halfway above the largest: to even = inf
  EXPECT_EQ(float_to_f16(1e9f), 0x7c00);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: to even
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: to even (up)
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);             // tie below 1 subnormal
  EXPECT_EQ(float_to_f16(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_f16(std::ldexp(1023.75f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);

  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc0a0), -5.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie: to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie: to even (up)
  EXPECT_EQ(float_to_bf16(3.14159f), 0x4049);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(SafetensorsConversion, EverySixteenBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    if (!std::isnan(f16_to_float(h))) {
      ASSERT_EQ(float_to_f16(f16_to_float(h)), h) << std::hex << bits;
    }
    if (!std::isnan(bf16_to_float(h))) {
      ASSERT_EQ(float_to_bf16(bf16_to_float(h)), h) << std::hex << bits;
    }
  }
}

TEST(Safetensors, RoundTripsF32F16BF16) {
  testing::TempDir dir;
  const std::string path = dir.file("t.safetensors");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(6);
  for (float& x : a)
    x = normal(rng);
  const std::vector<float> b = {1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24), 0.1f};
  const std::vector<float> c = {1.0f, -5.0f, 3.14159f, 1e-3f};
  const std::vector<float> empty;
  ASSERT_TRUE(
      write_safetensors(
          path,
          {make_tensor("a", DType::kF32, {2, 3}, a), make_tensor("b", DType::kF16, {5}, b),
           make_tensor("c", DType::kBF16, {2, 2}, c), make_tensor("e", DType::kF32, {0, 4}, empty)},
          {{"format", "pt"}})
          .ok());
  // The data section starts 8-byte aligned, as the reference writer leaves it.
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_bytes(path).data(), 8);
  EXPECT_EQ(header_len % 8, 0u);

  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->tensor_names(), (std::vector<std::string>{"a", "b", "c", "e"}));
  EXPECT_EQ(f->metadata().at("format"), "pt");

  Result<TensorView> tb = f->tensor("b");
  ASSERT_TRUE(tb.ok());
  EXPECT_EQ(tb->dtype, DType::kF16);
  EXPECT_EQ(tb->shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(tb->bytes.size(), 10u);
  uint16_t first = 0;
  std::memcpy(&first, tb->bytes.data(), 2);
  EXPECT_EQ(first, 0x3c00);

  std::vector<float> out(6, -1.0f);
  ASSERT_TRUE(f->read_f32("a", {2, 3}, out.data()).ok());
  EXPECT_EQ(out, a);
  out.assign(5, -1.0f);
  ASSERT_TRUE(f->read_f32("b", {5}, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24),
                                     0.0999755859375f}));  // 0.1 to the nearest half
  out.assign(4, -1.0f);
  ASSERT_TRUE(f->read_f32("c", {2, 2}, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -5.0f, 3.140625f, 0.00099945068359375f}));
  ASSERT_TRUE(f->read_f32("e", {0, 4}, nullptr).ok());
}

// NaN and infinity in every dtype the engine reads: first_non_finite finds the first (past the
// first vectorized block), and read_f32 refuses a tensor holding one, naming it and the element
// (what the weight loader reads: a slice is refused only if it holds one).
TEST(Safetensors, NanAndInfinityAreFoundAndRefusedByName) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3}) {
    std::vector<float> v(10000, 0.5f);
    v[3] = -448.0f;  // E4M3's largest magnitude (finite in every dtype)
    EXPECT_EQ(first_non_finite(make_tensor("x", dtype, {10000}, v).bytes, dtype), -1)
        << dtype_name(dtype);
    v[5000] = nan;
    EXPECT_EQ(first_non_finite(make_tensor("x", dtype, {10000}, v).bytes, dtype), 5000)
        << dtype_name(dtype);
    if (dtype == DType::kF8E4M3) continue;  // no infinity: it saturates at 448
    v[4097] = -inf;
    EXPECT_EQ(first_non_finite(make_tensor("x", dtype, {10000}, v).bytes, dtype), 4097)
        << dtype_name(dtype);
  }
  // The largest finite values' bit patterns are finite; E4M3's two NaN codes are not.
  const uint16_t halves[] = {0x7bff, 0xfbff};  // F16 +-65504
  EXPECT_EQ(first_non_finite(std::as_bytes(std::span<const uint16_t>(halves)), DType::kF16), -1);
  const uint16_t bf16s[] = {0x7f7f, 0xff7f, 0x7f80};  // BF16 +-max, then inf
  EXPECT_EQ(first_non_finite(std::as_bytes(std::span<const uint16_t>(bf16s)), DType::kBF16), 2);
  const std::byte codes[] = {std::byte{0x7e}, std::byte{0xfe}, std::byte{0xff}, std::byte{0x7f}};
  EXPECT_EQ(first_non_finite(std::span<const std::byte>(codes, 2), DType::kF8E4M3), -1);
  EXPECT_EQ(first_non_finite(std::span<const std::byte>(codes + 2, 1), DType::kF8E4M3), 0);
  EXPECT_EQ(first_non_finite(std::span<const std::byte>(codes + 3, 1), DType::kF8E4M3), 0);

  testing::TempDir dir;
  const std::string path = dir.file("t.safetensors");
  std::vector<float> w(6, 1.0f);
  w[4] = nan;  // row 1, column 1
  ASSERT_TRUE(
      write_safetensors(path, {make_tensor("model.norm.weight", DType::kBF16, {2, 3}, w)}).ok());
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  std::vector<float> out(6);
  const std::string refused =
      "tensor 'model.norm.weight' holds NaN or infinite values (the first at element 4 of 6)";
  EXPECT_THAT(f->read_f32("model.norm.weight", {2, 3}, out.data()).message(), HasSubstr(refused));
  EXPECT_THAT(f->read_f32("model.norm.weight", {2, 3}, out.data(), TensorSlice{1, 1, 1}).message(),
              HasSubstr(refused));
  EXPECT_TRUE(f->read_f32("model.norm.weight", {2, 3}, out.data(), TensorSlice{0, 0, 1}).ok());
  EXPECT_TRUE(f->read_f32("model.norm.weight", {2, 3}, out.data(), TensorSlice{1, 2, 1}).ok());
  // The mapped bytes, checked whole, say the same.
  Result<TensorView> t = f->tensor("model.norm.weight");
  ASSERT_TRUE(t.ok());
  const Status checked = check_finite_tensor(path, "model.norm.weight", t->bytes, t->dtype);
  EXPECT_THAT(checked.message(), HasSubstr(refused));
  EXPECT_THAT(checked.message(), HasSubstr(path));
}

TEST(Safetensors, LookupErrorsNameTheTensor) {
  testing::TempDir dir;
  const std::string path = dir.file("t.safetensors");
  const std::vector<float> v(15, 0.5f);
  ASSERT_TRUE(
      write_safetensors(path, {make_tensor("model.x.weight", DType::kBF16, {3, 5}, v)}).ok());
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  std::vector<float> out(15);

  Status missing = f->read_f32("model.y.weight", {3, 5}, out.data());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("no tensor 'model.y.weight'"));
  EXPECT_FALSE(f->tensor("model.y.weight").ok());

  Status shaped = f->read_f32("model.x.weight", {3, 4}, out.data());
  ASSERT_FALSE(shaped.ok());
  EXPECT_THAT(shaped.message(), HasSubstr("model.x.weight: shape [3, 5] in file, expected [3, 4]"));
  Status rank = f->read_f32("model.x.weight", {15}, out.data());
  EXPECT_THAT(rank.message(), HasSubstr("shape [3, 5] in file, expected [15]"));
}

TEST(Safetensors, UnsupportedDtypeIsRefusedWhenAskedFor) {
  testing::TempDir dir;
  const std::string path = dir.file("t.safetensors");
  write_raw(path,
            R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
            R"("w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}})",
            20);
  Result<SafetensorsFile> f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;  // a file may carry tensors the engine never reads
  EXPECT_EQ(f->tensor_names(), (std::vector<std::string>{"ids", "w"}));
  Result<TensorView> t = f->tensor("ids");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.error().message, HasSubstr("dtype I64"));
  float out[2];
  EXPECT_THAT(f->read_f32("ids", {2}, out).message(), HasSubstr("dtype I64"));
  EXPECT_TRUE(f->read_f32("w", {1}, out).ok());
}

struct Malformed {
  const char* label;
  std::string header;
  size_t data_bytes;
  std::optional<uint64_t> header_len;
  const char* error;
};

TEST(Safetensors, MalformedFilesAreErrors) {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  const Malformed cases[] = {
      {"header length beyond the file", "{}", 0, 1000, "exceeds the file"},
      {"huge header length", "{}", 0, uint64_t{1} << 62, "exceeds the limit"},
      {"invalid JSON", R"({"a": {"dtype": "F32", )", 0, {}, "not valid JSON"},
      {"empty header", "", 0, {}, "not valid JSON"},
      {"not an object", "[1, 2]", 0, {}, "not a JSON object"},
      {"entry not an object", R"({"a": 5})", 0, {}, "tensor 'a': entry is not an object"},
      {"missing dtype", R"({"a":{"shape":[1],"data_offsets":[0,4]}})", 4, {}, "missing dtype"},
      {"unknown dtype",
       R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}})",
       4,
       {},
       "tensor 'a': unknown dtype 'Q7'"},
      {"missing shape", R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", 4, {}, "missing shape"},
      {"negative dim",
       R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       4,
       {},
       "non-negative"},
      {"fractional dim",
       R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
       4,
       {},
       "non-negative"},
      {"shape overflow",
       R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       4,
       {},
       "too large"},
      // numel() multiplies in order: 2^62 * 2 overflowed int64 before the 0 (a fuzz finding)
      {"shape overflow before a zero dim",
       R"({"a":{"dtype":"F32","shape":[4611686018427387904,2,0],"data_offsets":[0,0]}})",
       0,
       {},
       "too large"},
      {"missing offsets", R"({"a":{"dtype":"F32","shape":[1]}})", 4, {}, "data_offsets"},
      {"one offset",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
       4,
       {},
       "data_offsets"},
      {"begin after end",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
       8,
       {},
       "begin after end"},
      {"offsets out of range", "{" + ok_entry + "}", 12, {}, "beyond the data section"},
      {"shape x dtype mismatch",
       R"({"a":{"dtype":"F16","shape":[2,2],"data_offsets":[0,16]}})",
       16,
       {},
       "needs 8"},
      {"overlap",
       "{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
       20,
       {},
       "overlap"},
      {"metadata not strings", R"({"__metadata__":{"format":3}})", 0, {}, "__metadata__"},
  };
  testing::TempDir dir;
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = dir.file("bad.safetensors");
    write_raw(path, c.header, c.data_bytes, c.header_len);
    const std::string error = open_error(path);
    EXPECT_THAT(error, HasSubstr(c.error));
    EXPECT_THAT(error, HasSubstr(path));
  }
}

TEST(Safetensors, ShortAndMissingFilesAreErrors) {
  testing::TempDir dir;
  EXPECT_THAT(open_error(dir.file("absent.safetensors")), HasSubstr("absent.safetensors"));
  EXPECT_THAT(open_error(dir.path()), HasSubstr("not a regular file"));
  for (int size : {0, 5}) {
    const std::string path = dir.file("short.safetensors");
    std::ofstream(path, std::ios::binary) << std::string(size, '\x01');
    EXPECT_THAT(open_error(path), HasSubstr("truncated"));
  }
}

// Every truncation of a valid file is refused; random byte flips never crash (run under ASan).
TEST(Safetensors, TruncatedAndCorruptedFilesNeverCrash) {
  testing::TempDir dir;
  const std::string path = dir.file("good.safetensors");
  const std::vector<float> v(12, 1.5f);
  ASSERT_TRUE(write_safetensors(path, {make_tensor("a", DType::kF16, {3, 4}, v),
                                       make_tensor("b", DType::kF32, {12}, v)})
                  .ok());
  const std::string good = file_bytes(path);
  const std::string bad = dir.file("bad.safetensors");
  for (size_t len = 0; len < good.size(); ++len) {
    std::ofstream(bad, std::ios::binary) << good.substr(0, len);
    ASSERT_FALSE(SafetensorsFile::open(bad).ok()) << "truncated to " << len << " bytes";
  }
  std::mt19937 rng(7);
  int opened = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string corrupt = good;
    for (int flips = 1 + trial % 3; flips > 0; --flips) {
      corrupt[rng() % (corrupt.size() - 96)] = static_cast<char>(rng());  // header mostly
    }
    std::ofstream(bad, std::ios::binary) << corrupt;
    Result<SafetensorsFile> f = SafetensorsFile::open(bad);
    if (!f.ok()) continue;
    ++opened;
    std::vector<float> out(12);
    for (const std::string& name : f->tensor_names()) {
      Result<TensorView> t = f->tensor(name);
      if (t.ok() && t->numel() <= 12) (void)f->read_f32(name, t->shape, out.data());
    }
  }
  EXPECT_LT(opened, 300);  // most corruptions are caught
}

TEST(Safetensors, WriterRefusesInconsistentTensors) {
  testing::TempDir dir;
  const std::vector<float> v(4, 1.0f);
  NamedTensor short_bytes = make_tensor("a", DType::kF32, {4}, v);
  short_bytes.bytes.pop_back();
  EXPECT_FALSE(write_safetensors(dir.file("x.safetensors"), {short_bytes}).ok());
  EXPECT_FALSE(write_safetensors(dir.file("x.safetensors"), {make_tensor("a", DType::kF32, {4}, v),
                                                             make_tensor("a", DType::kF16, {4}, v)})
                   .ok());
  EXPECT_FALSE(write_safetensors(dir.path() + "/no/such/dir/x.safetensors",
                                 {make_tensor("a", DType::kF32, {4}, v)})
                   .ok());
}

}  // namespace
}  // namespace kvc
