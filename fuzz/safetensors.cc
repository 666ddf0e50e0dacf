// SafetensorsFile::open on arbitrary files (written to one temporary file per process, rewritten
// for each input). Byte 0 picks the layout: even, the rest of the input is the whole file; odd,
// the rest is the header JSON up to the first NUL byte, then the data section, and the 8-byte
// length is prepended here (so that mutations of the JSON keep a consistent length). Every tensor
// of a file that opens is then read back in full, as the weight loader does (refused exactly when
// it holds a NaN or an infinity).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "replica/model/safetensors.h"

namespace {

const std::string& temp_path() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir ? dir : "/tmp") + "/kvc_fuzz_safetensors." + std::to_string(getpid());
  }();
  return path;
}

void write_file(const std::string& bytes) {
  FILE* f = std::fopen(temp_path().c_str(), "wb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) {
    const size_t nul = file.find('\0');
    const uint64_t header_len = nul == std::string::npos ? file.size() : nul;
    char prefix[8];
    std::memcpy(prefix, &header_len, 8);  // little-endian host
    if (nul != std::string::npos) file.erase(nul, 1);
    file.insert(0, prefix, 8);
  }
  write_file(file);
  kvc::Result<kvc::SafetensorsFile> opened = kvc::SafetensorsFile::open(temp_path());
  std::remove(temp_path().c_str());
  if (!opened.ok()) return 0;
  for (const std::string& name : opened->tensor_names()) {
    FUZZ_CHECK(opened->contains(name));
    kvc::Result<kvc::TensorView> t = opened->tensor(name);
    if (!t.ok()) continue;  // an unsupported dtype
    const int64_t numel = t->numel();
    FUZZ_CHECK(numel >= 0);
    FUZZ_CHECK(static_cast<uint64_t>(numel) * kvc::dtype_bytes(t->dtype) == t->bytes.size());
    std::vector<float> out(static_cast<size_t>(numel));
    // Refused exactly when a value is NaN or infinite (the weight loader's finiteness check).
    const kvc::Status read = opened->read_f32(name, t->shape, out.data());
    FUZZ_CHECK(read.ok() == (kvc::first_non_finite(t->bytes, t->dtype) < 0));
  }
  return 0;
}
