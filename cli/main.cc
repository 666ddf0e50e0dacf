// kvcascade: one binary, several commands (router, replica, generate, plan, bench, demo, loadgen,
// tokenize), without CUDA: it runs on any machine, and hands a command that needs the GPU to
// kvcascade-cuda (cli/main_cuda.cc).
#include "cli/commands.h"

int main(int argc, char** argv) {
  return kvc::cli::run_kvcascade(argc, argv, {});
}
