// Replays fuzz inputs through a target's LLVMFuzzerTestOneInput without libFuzzer: every regular
// file of each directory argument (a missing directory is skipped), in sorted order. A finding
// shows as an assert, a crash or a non-zero exit; the file being run is printed first on request
// (KVC_FUZZ_VERBOSE=1) so that a crash names its input.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const bool verbose = std::getenv("KVC_FUZZ_VERBOSE") != nullptr;
  size_t num_inputs = 0;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (!fs::is_directory(argv[i], ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(argv[i])) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& path : files) {
      if (verbose) std::fprintf(stderr, "%s\n", path.c_str());
      std::ifstream in(path, std::ios::binary);
      std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++num_inputs;
    }
  }
  std::printf("replayed %zu inputs\n", num_inputs);
  return 0;
}
