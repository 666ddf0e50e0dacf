// kvcascade-cuda: kvcascade with the CUDA backend and the GPU benchmarks linked in (it needs the
// CUDA libraries: cuBLASLt, and the driver's libcuda).
#include "bench/cuda/engine_bench.h"
#include "bench/cuda/gemm_bench.h"
#include "bench/cuda/kernel_bench.h"
#include "cli/commands.h"
#include "replica/backend/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  kvc::cli::CudaEntry cuda;
  cuda.backend = &kvc::make_cuda_backend;
  cuda.benches.kernels = &kvc::bench::run_kernel_bench;
  cuda.benches.gemm = &kvc::bench::run_gemm_bench;
  cuda.benches.engine = &kvc::bench::run_engine_bench;
  return kvc::cli::run_kvcascade(argc, argv, cuda);
}
