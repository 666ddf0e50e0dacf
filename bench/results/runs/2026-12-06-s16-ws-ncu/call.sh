#!/usr/bin/env bash
# Sixteenth session: Nsight Compute of one layer's prefix pass at S = 16 (the seed's tree, no
# private tokens), the shared-grid cascade kernel against the warp-specialised prefix kernel,
# 16-bit cache. Run after BENCH_KERNELS=1 bash bench/pack_gpu_bin.sh, carry the binaries (BIN, default gpu-bin):
# OUT=... bash bench/results/runs/2026-12-06-s16-ws-ncu/call.sh
set -u
B=${BIN:-gpu-bin}
export LD_LIBRARY_PATH=$PWD/$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
sections="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy"
for k in cascade_kernel prefix_ws_kernel; do
  timeout 150 ncu --cache-control none --clock-control none -k "regex:$k" --launch-skip 40 \
    --launch-count 1 $sections --import-source no \
    $B/bench_kernels --quick --cascade-only --prefix-only --only 0 --iters 3 --out /dev/null \
    >"$OUT/ncu-$k.txt" 2>&1
  echo "$k rc=$?"
  grep -E "Duration|Registers|Throughput|Pipe|Issued|Eligible|Warp Cycles|Stall|Active Warps|No Eligible|L2 Hit|Block Limit|Achieved" "$OUT/ncu-$k.txt" | head -60
done
