#!/usr/bin/env bash
# Session 8, call 1: the attention's merge writes the o projection's FP8 rows (no quantize pass):
# the CUDA tests, then the FP8 + FP8 KV seed rollout with the merge (default) and with the pass
# (--fp8-attention-quantize-pass), alternating, same binary.
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 150 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
tail -4 "$OUT/kernels_cuda_test.txt"
timeout 240 gpu-bin/replica_cuda_test --gtest_brief=1 >"$OUT/replica_cuda_test.txt" 2>&1
tail -4 "$OUT/replica_cuda_test.txt"
for i in 1 2; do
  for v in "merge" "pass --fp8-attention-quantize-pass"; do
    set -- $v
    name=$1
    shift
    timeout 150 gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 \
      --attention cascade --graphs on --no-profile "$@" --out "$OUT/engine-$name-$i.json" \
      >"$OUT/engine-$name-$i.txt" 2>&1
    echo "== $name $i"
    grep -A4 "  S  steps" "$OUT/engine-$name-$i.txt"
    grep "rollout:" "$OUT/engine-$name-$i.txt" | tail -1
  done
done
