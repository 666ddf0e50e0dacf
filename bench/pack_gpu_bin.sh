#!/usr/bin/env bash
# Copies what bench/gpu_engine.sh runs on the GPU host into gpu-bin/ (ignored by git, carried by
# the device call): the CUDA test binaries, kvcascade and kvcascade-cuda (to which kvcascade hands
# --backend cuda and the GPU benchmarks), bench_engine_host (the engine's host work per step),
# with BENCH_KERNELS=1 bench_kernels (the kernel benchmark's diagnostic flags: --prefix-only,
# --cascade-only), and the shared libraries the GPU host lacks (prometheus-cpp, utf8proc,
# simdjson, tcmalloc). The binaries are stripped: the device tool carries at most 64 MiB with the
# tracked tree, and gpu-bin with bench_kernels came close to it.
# BUILD: the CUDA-enabled build dir (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
rm -rf gpu-bin
mkdir -p gpu-bin/lib
cp "$build/tests/kernels/cuda/kernels_cuda_test" "$build/tests/replica/backend/replica_cuda_test" \
  "$build/cli/kvcascade" "$build/cli/kvcascade-cuda" "$build/bench/bench_engine_host" gpu-bin/
[ "${BENCH_KERNELS:-0}" = 1 ] && cp "$build/bench/cuda/bench_kernels" gpu-bin/
find gpu-bin -maxdepth 1 -type f -exec strip {} +
for lib in $(ldd "$build/cli/kvcascade-cuda" "$build/tests/replica/backend/replica_cuda_test" |
  awk '/prometheus|utf8proc|simdjson|tcmalloc/ {print $3}' | sort -u); do
  cp -L "$lib" gpu-bin/lib/
done
grep -qx 'gpu-bin/' .git/info/exclude 2>/dev/null || echo 'gpu-bin/' >>.git/info/exclude
du -sh gpu-bin
