#!/usr/bin/env bash
# Fourteenth session: two latency cuts in the small decode ops, A/B in one binary through
# temporary switches (KVC_NORM_HELD4=1: add + RMSNorm as before, its weights read after the
# reduction; KVC_ROPE_512=1: RoPE/KV append at 512 threads as before, two passes for part of a
# token's 768 units). The ops' tests, then the seed rollout (cascade, graphs, --no-profile) new /
# old / new, bf16 and FP8 + FP8 KV, then Nsight Compute's durations (warm caches) of one layer,
# new and old. Run after bash bench/pack_gpu_bin.sh, carry gpu-bin: OUT=... bash .../call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 gpu-bin/kernels_cuda_test --gtest_brief=1 >"$OUT/kernels_cuda_test.txt" 2>&1
tail -3 "$OUT/kernels_cuda_test.txt"
engine() {  # name, env assignments..., --, bench flags
  local name=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 150 gpu-bin/kvcascade bench engine --attention cascade --graphs on \
    --no-profile "$@" >"$OUT/engine-$name.txt" 2>&1
  echo "== $name: $(grep -A7 '  S  steps' "$OUT/engine-$name.txt" | awk '$1 ~ /^[0-9]+$/ {printf "%s ", $3}')$(grep -m1 'rollout:.*decode' "$OUT/engine-$name.txt" | sed 's/.*total, //; s/ decode.*//')"
}
F8="--quantization fp8 --kv-cache-dtype fp8"
engine bf16-new X=1 --
engine bf16-old KVC_NORM_HELD4=1 KVC_ROPE_512=1 --
engine bf16-new2 X=1 --
engine fp8-new X=1 -- $F8
engine fp8-old KVC_NORM_HELD4=1 KVC_ROPE_512=1 -- $F8
engine fp8-new2 X=1 -- $F8
for v in new old; do
  e=X=1
  [ $v = old ] && e="KVC_NORM_HELD4=1 KVC_ROPE_512=1"
  env $e timeout 200 ncu --cache-control none --clock-control none --launch-skip 6000 \
    --launch-count 20 --metrics gpu__time_duration.sum --csv gpu-bin/kvcascade bench engine \
    --attention cascade --graphs off --no-profile --gen 96 $F8 >"$OUT/ncu-fp8-$v.csv" 2>/dev/null
  echo "ncu $v:"
  grep -E '"gpu__time_duration.sum"' "$OUT/ncu-fp8-$v.csv" | awk -F'","' '{printf "  %-40.40s %s\n", $5, $NF}' | grep -E "norm|rope" | head -8
done
