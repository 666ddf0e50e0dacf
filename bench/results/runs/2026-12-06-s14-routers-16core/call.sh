#!/usr/bin/env bash
# Fourteenth session: issue 28 §2's one-against-four-routers pairs (the thirteenth session's
# run.sh: H200 rl mix, seed 1, 5,000 requests, 16 sim replicas, policy kvcascade, every replay in
# an invocation of its own) on the GPU host's 16 CPU cores instead of the 2-core development VM,
# where four routers' I/O threads, the 16 sim replicas and the client share two cores. Six pairs,
# two pairs (four replays) at a time. Run after bash bench/pack_gpu_bin.sh, carry gpu-bin:
#   OUT=... bash bench/results/runs/2026-12-06-s14-routers-16core/call.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
nproc
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/usr/local/cuda/lib64
timeout 60 gpu-bin/kernels_cuda_test --gtest_filter="*GemmTuning*" >"$OUT/tuning_test.txt" 2>&1; tail -2 "$OUT/tuning_test.txt"
k=gpu-bin/kvcascade
mkdir -p "$OUT/logs"
replay() {  # pair, routers
  timeout 280 $k bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$2" >"$OUT/logs/rl-r$2-$1.txt" 2>&1
}
SECONDS=0
for round in "1 2" "3 4" "5 6"; do
  for i in $round; do
    replay "$i" 1 &
    replay "$i" 4 &
  done
  wait
  echo "round $round done at $SECONDS s"
done
for i in 1 2 3 4 5 6; do
  for n in 1 4; do
    echo "pair $i routers $n: $(grep -E '^rl +kvcascade' "$OUT/logs/rl-r$n-$i.txt" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
  done
done | tee "$OUT/summary.txt"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"  # (the device tool returns 8 files at most)
