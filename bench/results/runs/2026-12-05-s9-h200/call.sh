#!/usr/bin/env bash
# Session 9: NOT RUN (no GPU was lent: fourteen tries on nvidia-h200 and nvidia-h100-x1;
# session 10, 2026-12-06: six more, at 00:02, 00:34 twice, 00:44, 01:13 and 02:31, each "no device
# machine could be started", about 90 s of device budget apiece). The H200 record at this session's GPU code (the eighth session's merge FP8 rows and
# the test split, block_reduce.cuh): the CUDA tests, the PyTorch anchor, the seed rollout with
# FP8 weights + FP8 KV (profiled beside the anchor, then --no-profile) and bf16 (--no-profile),
# cascade, graphs. Run: OUT=... bash bench/results/runs/2026-12-05-s9-h200/call.sh
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
  "${a[@]}" --out "$OUT/engine-bf16.json" >"$OUT/engine-bf16.txt" 2>&1
grep -A4 "  S  steps" "$OUT/engine-bf16.txt"; grep "rollout" "$OUT/engine-bf16.txt" | tail -2
tail -6 "$OUT/engine-bf16.txt"
