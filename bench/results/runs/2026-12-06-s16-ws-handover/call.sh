#!/usr/bin/env bash
# Sixteenth session, after review: checks handover.diff here (the warp-specialised prefix pass's
# producer hands tile t over before issuing tile t + 4; FP8: 4 fp16 stages, 5 raw), so that a
# hand-over no longer waits on the consumers' release of their latest tiles. Not run yet. Apply
# the diff, build, BENCH_KERNELS=1 bash bench/pack_gpu_bin.sh, carry gpu-bin, then
# OUT=... bash bench/results/runs/2026-12-06-s16-ws-handover/call.sh
# It runs the attention tests (the new pass over 5-token blocks too, the workspace poisoned
# before every launch), then the seed's S = 16 case: the prefix pass alone and with its suffix.
set -u
BIN=${BIN:-gpu-bin}; export LD_LIBRARY_PATH=$PWD/$BIN/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 $BIN/kernels_cuda_test --gtest_filter='*WarpSpecialised*:*Fp8Cache*:*RoutesAgree*:*CascadeMatches*' --gtest_brief=1 >"$OUT/attention_test.txt" 2>&1
echo "attention tests rc=$?"; tail -3 "$OUT/attention_test.txt"
for kv in fp16 fp8; do
  a=(); [ "$kv" = fp8 ] && a=(--kv-cache-dtype fp8)
  timeout 60 $BIN/bench_kernels --quick --cascade-only --prefix-only --only 0 "${a[@]}" \
    --out "$OUT/prefix-$kv.json" 2>&1 | grep -A1 "^seed" | cut -c1-150
  timeout 60 $BIN/bench_kernels --quick --cascade-only --only 0 "${a[@]}" --out "$OUT/kernels-$kv.json" \
    2>&1 | grep -A1 "^seed" | cut -c1-150
done
