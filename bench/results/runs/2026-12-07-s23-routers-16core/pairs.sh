#!/usr/bin/env bash
# Twenty-third session: more one-against-four-router pairs of the committed build (20bb974) for
# issue 28 §2, as ../2026-12-07-s22-routers-announced/announced.sh (H200 rl mix, seed 1, 5,000
# requests, 16 sim replicas, kvcascade, every replay an invocation of its own, four at a time on
# the GPU host's 16 cores), two pairs a round. gpu-bin: kvcascade (stripped) and its libraries.
#   OUT=... ROUNDS="25 26 27 28 29 30 31 32" bash bench/results/runs/2026-12-07-s23-routers-16core/pairs.sh
# Pairs i (slots "a") and i+100 (slots "b").
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
nproc
mkdir -p "$OUT/logs"
replay() {  # pair, routers
  timeout 280 gpu-bin/kvcascade bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$2" >"$OUT/logs/rl-r$2-$1.txt" 2>&1
}
SECONDS=0
for i in ${ROUNDS:-25 26 27 28 29 30 31 32}; do
  replay "$i" 1 & replay "$i" 4 & replay $((i + 100)) 1 & replay $((i + 100)) 4 &
  wait
  echo "round $i done at $SECONDS s"
done
for f in "$OUT"/logs/rl-r1-*.txt; do
  i=${f##*-}; i=${i%.txt}
  for n in 1 4; do
    g="$OUT/logs/rl-r$n-$i.txt"
    echo "pair $i routers $n: $(grep -E '^rl +kvcascade' "$g" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
  done
done | tee "$OUT/summary.txt"
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$OUT/logs"
