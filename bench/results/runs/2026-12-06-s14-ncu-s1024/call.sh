#!/usr/bin/env bash
# Fourteenth session: where the FP8 + FP8 KV step's attention goes at S ~ 1024 (the cascade
# kernel, prefix + suffix passes in one launch, and its merge), by Nsight Compute with warm caches
# (--cache-control none): the 30,000th cascade launch of the seed rollout (step ~937, 32 a step)
# and the merge after it. Eager steps (--graphs off) so that each launch is its own.
# Run after bash bench/pack_gpu_bin.sh, carry gpu-bin: OUT=... bash .../call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 500 ncu --cache-control none --clock-control none --kernel-name regex:'cascade_kernel|merge_fp8' \
  --launch-skip 60000 --launch-count 4 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
  --section Occupancy --section WarpStateStats -o "$OUT/s1024" \
  gpu-bin/kvcascade bench engine --quantization fp8 --kv-cache-dtype fp8 --attention cascade \
  --graphs off --no-profile --gen 1024 >"$OUT/bench.txt" 2>&1
echo "ncu rc $?"; tail -2 "$OUT/bench.txt"
ncu --import "$OUT/s1024.ncu-rep" --page details >"$OUT/s1024.txt" 2>&1
rm -f "$OUT/s1024.ncu-rep"
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Grid Size|Block Size|Achieved Occupancy|Registers Per|Warp Cycles Per Issued" "$OUT/s1024.txt" | head -60
