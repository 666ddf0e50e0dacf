#!/usr/bin/env bash
# Fourteenth session: each decode kernel's own duration with the caches as the previous kernel
# left them (Nsight Compute, --cache-control none, clocks unlocked; the host has no Nsight
# Systems), bf16 and FP8 + FP8 KV, cascade, eager steps (each launch its own), 20 launches a
# little past the prefill: two layers of an early decode step. The profiled mode of bench engine
# times each op with events around it, which adds the launch gaps; this does not.
# Run after bash bench/pack_gpu_bin.sh, carry gpu-bin: OUT=... bash .../call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
for mode in bf16 fp8kv8; do
  flags=""
  [ $mode = fp8kv8 ] && flags="--quantization fp8 --kv-cache-dtype fp8"
  timeout 200 ncu --cache-control none --clock-control none --launch-skip 6000 --launch-count 24 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    --csv gpu-bin/kvcascade bench engine --attention cascade --graphs off --no-profile --gen 96 \
    $flags >"$OUT/ncu-$mode.csv" 2>"$OUT/ncu-$mode.err"
  echo "$mode rc $?"
  grep -E '"gpu__time_duration.sum"' "$OUT/ncu-$mode.csv" | awk -F'","' '{printf "%-60.60s %s\n", $5, $NF}' | head -30
done
