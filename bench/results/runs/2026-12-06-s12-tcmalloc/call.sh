#!/usr/bin/env bash
# Twelfth session: the binaries linked with tcmalloc (f2d1db7) on the GPU host: the CUDA tests,
# then the FP8 serving run (replica --backend cuda + router + loadgen, 2 tenants' 4 KB prompts,
# n = 64, 1,024 tokens; the fifth session's command). Run after bash bench/pack_gpu_bin.sh,
# carry gpu-bin: OUT=... bash bench/results/runs/2026-12-06-s12-tcmalloc/call.sh
set -u
LD_LIBRARY_PATH=$PWD/gpu-bin/lib ldd gpu-bin/kvcascade-cuda | grep -E "tcmalloc|not found"
OUT="$OUT" bash bench/gpu_engine.sh tests 2>&1 | grep -E "PASSED|FAILED|SKIPPED|tests ran" | head
REPLICA_ARGS="--quantization fp8 --kv-cache-dtype fp8" MAX_TOKENS=1024 SECONDS_MEASURED=90 \
  OUT="$OUT" bash bench/gpu_engine.sh serve 2>&1 | tail -15
grep -iE "weights|KV cache" "$OUT/replica.log" | head -5
