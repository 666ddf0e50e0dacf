#!/usr/bin/env bash
# Twenty-seventh session, device call C (an H100 host's 16 cores), ae10301 (gpu-bin/kvcascade,
# stripped, with pack_gpu_bin's libraries): the mixed fleet (8 H200 + 8 A10G sim replicas) with
# its baselines in the same call (issue 28 §1: TTFT p90 <= 0.8x the better of sglang_cache_aware
# and consistent_hash), then one-against-four-router pairs (§2) as
# ../2026-12-07-s23-routers-16core/pairs.sh. Four replays at a time.
#   OUT=... bash bench/results/runs/2026-12-07-s27-16core/callC.sh
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
nproc
SECONDS=0
mkdir -p "$OUT/c"
fleet() {  # mix rate policy run
  timeout 280 gpu-bin/kvcascade bench routing --sim-preset h200-llama3-8b,a10g-llama3-8b \
    --replicas 16 --requests 5000 --mix "$1" --rate "$2" --seed 1 --policy "$3" \
    --out "$OUT/c/fleet-$1-$3-r$4.json" 2>&1 | grep -v '^  \[' >"$OUT/c/fleet-$1-$3-r$4.txt"
}
pair() {  # pair routers
  timeout 200 gpu-bin/kvcascade bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$2" >"$OUT/c/rl-r$2-$1.txt" 2>&1
}
fleet chat 110 kvcascade 1 & fleet chat 110 kvcascade 2 &
fleet chat 110 sglang_cache_aware 1 & fleet chat 110 consistent_hash 1 &
wait
echo "round 1 done at $SECONDS s"
fleet mixed 60 kvcascade 1 & fleet mixed 60 sglang_cache_aware 1 &
fleet chat 110 kvcascade 3 & fleet chat 110 sglang_cache_aware 2 &
wait
echo "round 2 done at $SECONDS s"
for i in ${PAIRS:-51 52 53 54}; do
  [ "$SECONDS" -gt 480 ] && break
  pair "$i" 1 & pair "$i" 4 & pair $((i + 100)) 1 & pair $((i + 100)) 4 &
  wait
  echo "pairs $i done at $SECONDS s"
done
for f in "$OUT"/c/fleet-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +(kvcascade|sglang_cache_aware|consistent_hash) ' "$f" | head -1)"
done | tee "$OUT/summary-fleet.txt"
for f in "$OUT"/c/rl-r1-*.txt; do
  i=${f##*-}; i=${i%.txt}
  for n in 1 4; do
    echo "pair $i routers $n: $(grep -E '^rl +kvcascade' "$OUT/c/rl-r$n-$i.txt" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
  done
done | tee "$OUT/summary-pairs.txt"
tar czf "$OUT/c.tar.gz" -C "$OUT" c && rm -rf "${OUT:?}/c"
