#!/usr/bin/env bash
# Sixteenth session: where the final build's warp-specialised prefix pass waits (Nsight Compute
# source counters and stall reasons, S = 16 prefix only, 16-bit cache).
# After BENCH_KERNELS=1 bash bench/pack_gpu_bin.sh (carry gpu-bin):
# OUT=... bash bench/results/runs/2026-12-06-s16-ws-ncu/stalls.sh
set -u
BIN=${BIN:-gpu-bin}; export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
timeout 200 ncu --cache-control none --clock-control none -k regex:prefix_ws --launch-skip 40 \
  --launch-count 1 --section WarpStateStats --section SourceCounters --import-source no \
  --print-details all \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
  $BIN/bench_kernels --quick --cascade-only --prefix-only --only 0 --iters 3 --out /dev/null \
  >"$OUT/ncu-ws-stalls.txt" 2>&1
echo "ncu rc=$?"
grep -E "stalled_.*ratio" "$OUT/ncu-ws-stalls.txt" | sort -k3 -n -r | head -14
sed -n '/Warp Stall Sampling/,+40p' "$OUT/ncu-ws-stalls.txt" | head -60
