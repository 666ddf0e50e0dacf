#!/usr/bin/env bash
# Sixteenth session, final CUDA build: every CUDA test, then the kernel benchmark's quick cases
# with the shared-grid cascade and the warp-specialised prefix pass side by side (16-bit and FP8
# caches), and the prefix pass alone at S = 16. BIN: a folder with kernels_cuda_test,
# replica_cuda_test, bench_kernels and lib/ (BENCH_KERNELS=1 bash bench/pack_gpu_bin.sh makes gpu-bin; carry it).
# OUT=... BIN=... bash bench/results/runs/2026-12-06-s16-ws-final/call.sh
set -u
BIN=${BIN:-gpu-bin}; export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 $BIN/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
echo "kernels_cuda_test rc=$?"; tail -3 "$OUT/kernels_cuda_test.txt"
timeout 150 $BIN/replica_cuda_test --gtest_brief=1 >"$OUT/replica_cuda_test.txt" 2>&1
echo "replica_cuda_test rc=$?"; tail -3 "$OUT/replica_cuda_test.txt"
for kv in fp16 fp8; do
  a=(); [ "$kv" = fp8 ] && a=(--kv-cache-dtype fp8)
  timeout 100 $BIN/bench_kernels --quick --cascade-only "${a[@]}" --out "$OUT/kernels-$kv.json" \
    >"$OUT/kernels-$kv.txt" 2>&1
  echo "bench $kv rc=$?"; grep -v "^$\|^wrote" "$OUT/kernels-$kv.txt" | cut -c1-150
  timeout 60 $BIN/bench_kernels --quick --cascade-only --prefix-only --only 0 "${a[@]}" \
    --out "$OUT/prefix-$kv.json" 2>&1 | grep -A1 "^seed" | cut -c1-150
done
