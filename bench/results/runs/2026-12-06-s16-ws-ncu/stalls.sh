#!/usr/bin/env bash
# Sixteenth session, third call: the warp-specialised prefix pass with ping-pong always on (its
# tests), with shorter chunks (several items per CTA: KVC_WS_CHUNK_TILES), and where its warps
# wait (Nsight Compute source counters and stall reasons, S = 16 prefix only, 16-bit cache).
# OUT=... BIN=... bash bench/results/runs/2026-12-06-s16-ws-ncu/stalls.sh
set -u
BIN=${BIN:-gpu-bin}; export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
timeout 100 $BIN/kernels_cuda_test --gtest_filter="*WarpSpecialised*:*Fp8Cache*:*CascadeMatches*:CudaAttentionPlan*" --gtest_brief=1 2>&1 | tail -2
for c in 16 8 4; do for kv in x fp8; do a=(); [ $kv = fp8 ] && a=(--kv-cache-dtype fp8)
  echo "chunk tiles $c kv=$kv"; KVC_WS_CHUNK_TILES=$c timeout 60 $BIN/bench_kernels --quick --cascade-only --prefix-only --only 0 "${a[@]}" --out /dev/null 2>&1 | grep -A1 "^seed" | cut -c1-110; done; done
timeout 200 ncu --cache-control none --clock-control none -k regex:prefix_ws --launch-skip 40 \
  --launch-count 1 --section WarpStateStats --section SourceCounters --import-source no \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
  $BIN/bench_kernels --quick --cascade-only --prefix-only --only 0 --iters 3 --out /dev/null \
  >"$OUT/ncu-ws-stalls.txt" 2>&1
echo "ncu rc=$?"
grep -E "stalled_.*ratio" "$OUT/ncu-ws-stalls.txt" | sort -k3 -n -r | head -14
sed -n '/Warp Stall Sampling/,+40p' "$OUT/ncu-ws-stalls.txt" | head -60
