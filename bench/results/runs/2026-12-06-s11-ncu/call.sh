#!/usr/bin/env bash
# Session 11: Nsight Compute over one decode layer of the seed rollout (FP8 weights + FP8 KV,
# cascade, no graphs so each launch is its own): which of the small ops and GEMMs are latency-
# bound, and how far each is from the DRAM roofline. Run: OUT=... bash .../call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 ncu --clock-control none --target-processes all --launch-skip 6000 --launch-count 16 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
  --section Occupancy --section WarpStateStats -o "$OUT/layer" \
  gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade \
  --graphs off --no-profile --gen 128 >"$OUT/bench.txt" 2>&1
echo "ncu rc $?"; tail -3 "$OUT/bench.txt"
ncu --import "$OUT/layer.ncu-rep" --page details >"$OUT/layer.txt" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Grid Size|Block Size|Achieved Occupancy|Registers Per" "$OUT/layer.txt" | head -150
