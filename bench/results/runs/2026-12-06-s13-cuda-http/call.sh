#!/usr/bin/env bash
# Run after bash bench/pack_gpu_bin.sh, carry gpu-bin: OUT=... bash .../call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 python3 bench/results/runs/2026-12-06-s13-cuda-http/smoke.py gpu-bin/kvcascade "$OUT" \
  2>&1 | tee "$OUT/smoke.txt" | grep -v Warning
tail -20 "$OUT/replica.log"
