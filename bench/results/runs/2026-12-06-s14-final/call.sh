#!/usr/bin/env bash
# Fourteenth session: the session's final build on the GPU host (GEMM tuning, the small ops'
# shorter round trips): the CUDA tests, the PyTorch anchor, the seed rollout with FP8 weights +
# FP8 KV (profiled beside the anchor, then --no-profile) and bf16 (--no-profile, beside the
# anchor), cascade, graphs. Run after bash bench/pack_gpu_bin.sh, carry gpu-bin and anchor
# (../shared/bench/torch_cascade_anchor.py): OUT=... bash bench/results/runs/2026-12-06-s14-final/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 200 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
tail -3 "$OUT/kernels_cuda_test.txt"
timeout 120 gpu-bin/replica_cuda_test --gtest_brief=1 >"$OUT/replica_cuda_test.txt" 2>&1
tail -3 "$OUT/replica_cuda_test.txt"
OUT="$OUT" PYTHONUNBUFFERED=1 timeout 150 python3 anchor/torch_cascade_anchor.py >"$OUT/anchor.txt" 2>&1
tail -4 "$OUT/anchor.txt"
a=()
[ -f "$OUT/anchor.json" ] && a=(--anchor "$OUT/anchor.json")
timeout 150 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 \
  --attention cascade --graphs on "${a[@]}" --out "$OUT/engine-fp8kv8.json" \
  >"$OUT/engine-fp8kv8.txt" 2>&1
grep -v "^$" "$OUT/engine-fp8kv8.txt" | head -70
timeout 100 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 \
  --attention cascade --graphs on --no-profile >"$OUT/engine-fp8kv8-noprof.txt" 2>&1
grep -A4 "  S  steps" "$OUT/engine-fp8kv8-noprof.txt"; grep "rollout" "$OUT/engine-fp8kv8-noprof.txt" | tail -2
timeout 120 gpu-bin/kvcascade bench engine --attention cascade --graphs on --no-profile \
  "${a[@]}" >"$OUT/engine-bf16.txt" 2>&1
grep -A4 "  S  steps" "$OUT/engine-bf16.txt"; grep "rollout" "$OUT/engine-bf16.txt" | tail -2
sed -n "/^GEMM tuning/,/^$/p" "$OUT/engine-bf16.txt"; tail -6 "$OUT/engine-bf16.txt"
