#!/usr/bin/env bash
# Copies what bench/gpu_engine.sh runs on the GPU host into gpu-bin/ (ignored by git, carried by
# the device call): the CUDA test binaries, kvcascade and kvcascade-cuda (to which kvcascade hands
# --backend cuda and the GPU benchmarks), bench_engine_host (the engine's host work per step),
# bench_kernels (the kernel benchmark's diagnostic flags: --prefix-only, --cascade-only), and
# the shared libraries the GPU host lacks (prometheus-cpp, utf8proc, simdjson, tcmalloc).
# BUILD: the CUDA-enabled build dir (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
rm -rf gpu-bin
mkdir -p gpu-bin/lib
cp "$build/tests/kernels/cuda/kernels_cuda_test" "$build/tests/replica/backend/replica_cuda_test" \
  "$build/cli/kvcascade" "$build/cli/kvcascade-cuda" "$build/bench/bench_engine_host" \
  "$build/bench/cuda/bench_kernels" gpu-bin/
for lib in $(ldd "$build/cli/kvcascade-cuda" "$build/tests/replica/backend/replica_cuda_test" |
  awk '/prometheus|utf8proc|simdjson|tcmalloc/ {print $3}' | sort -u); do
  cp -L "$lib" gpu-bin/lib/
done
grep -qx 'gpu-bin/' .git/info/exclude 2>/dev/null || echo 'gpu-bin/' >>.git/info/exclude
du -sh gpu-bin
