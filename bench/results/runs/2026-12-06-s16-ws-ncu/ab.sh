#!/usr/bin/env bash
# Sixteenth session, second call: the warp-specialised prefix pass's variants (KVC_WS_PINGPONG,
# KVC_WS_VARIANT=1: the scores as two k-half accumulation chains), their tests, and Nsight
# Compute of the prefix pass (call.sh). BIN: the binaries' folder (bench_kernels,
# kernels_cuda_test, lib/; BENCH_KERNELS=1 bash bench/pack_gpu_bin.sh makes gpu-bin).
# OUT=... BIN=... bash bench/results/runs/2026-12-06-s16-ws-ncu/ab.sh
set -u
BIN=${BIN:-gpu-bin}; export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 $BIN/kernels_cuda_test --gtest_filter='*WarpSpecialised*:*Fp8Cache*' --gtest_brief=1 2>&1 | tail -2
KVC_WS_PINGPONG=1 KVC_WS_VARIANT=1 timeout 100 $BIN/kernels_cuda_test --gtest_filter='*WarpSpecialised*' --gtest_brief=1 2>&1 | tail -2
for v in 0 1; do for pp in 0 1; do for kv in x fp8; do a=(); [ $kv = fp8 ] && a=(--kv-cache-dtype fp8)
 echo "variant=$v pingpong=$pp kv=$kv"; KVC_WS_VARIANT=$v KVC_WS_PINGPONG=$pp timeout 60 $BIN/bench_kernels --quick --cascade-only --prefix-only --only 0 "${a[@]}" --out /dev/null 2>&1 | grep -A1 "^seed" | cut -c1-100; done; done; done
BIN=$BIN OUT=$OUT bash bench/results/runs/2026-12-06-s16-ws-ncu/call.sh
