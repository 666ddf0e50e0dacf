#!/usr/bin/env bash
# Thirteenth session: where the engine's host time per decode step goes on the GPU host (the
# bench engine's "engine" column, 0.18-0.23 ms there against 0.04 ms of bench_engine_host on the
# development machine): bench_engine_host there (siblings with their own tokens, and drawing
# equal tokens as greedy decoding does), then the seed rollout, FP8 weights + FP8 KV, cascade,
# graphs, --no-profile, with the engine's split (schedule / build the batch / the rest).
# Run after bash bench/pack_gpu_bin.sh, carry gpu-bin:
#   OUT=... bash bench/results/runs/2026-12-06-s13-host/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
lscpu | grep -E "Model name|^CPU\(s\)|MHz" | head -4
gpu-bin/bench_engine_host | tee "$OUT/bench_engine_host.txt"
gpu-bin/bench_engine_host 2 64 4096 1024 same | tee -a "$OUT/bench_engine_host.txt"
timeout 150 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 \
  --attention cascade --graphs on --no-profile --out "$OUT/engine-fp8kv8.json" \
  >"$OUT/engine-fp8kv8.txt" 2>&1
grep -v "^$" "$OUT/engine-fp8kv8.txt" | head -30
