#!/usr/bin/env bash
# Sixteenth session: the warp-specialised prefix pass (kernels/cuda/attention_prefix_ws.cuh) on
# the GPU host: the attention tests, then the kernel benchmark's seed cases with the shared-grid
# cascade and the warp-specialised one side by side (16-bit and FP8 caches), and the prefix pass
# alone. Run after BENCH_KERNELS=1 bash bench/pack_gpu_bin.sh, carry gpu-bin:
# OUT=... bash bench/results/runs/2026-12-06-s16-ws/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/${BIN:-gpu-bin}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 150 ${BIN:-gpu-bin}/kernels_cuda_test --gtest_filter='CudaAttention*' --gtest_brief=1 \
  >"$OUT/attention_test.txt" 2>&1
echo "attention tests rc=$?"
grep -v "^\[       OK\|^$" "$OUT/attention_test.txt" | head -40
for kv in fp16 fp8; do
  a=()
  [ "$kv" = fp8 ] && a=(--kv-cache-dtype fp8)
  timeout 150 ${BIN:-gpu-bin}/bench_kernels --quick --cascade-only "${a[@]}" --out "$OUT/kernels-$kv.json" \
    >"$OUT/kernels-$kv.txt" 2>&1
  echo "bench $kv rc=$?"
  grep -v "^$" "$OUT/kernels-$kv.txt"
  timeout 60 ${BIN:-gpu-bin}/bench_kernels --quick --cascade-only --prefix-only --only 0 "${a[@]}" \
    --out /dev/null 2>&1 | tail -3
done
