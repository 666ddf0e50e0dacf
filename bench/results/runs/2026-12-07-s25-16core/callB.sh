#!/usr/bin/env bash
# Twenty-fifth session, device call B (right after call A, the same warm host and gpu-bin):
#  1. the H200 Mooncake row (arrivals 4x) with the committed defaults, four replays at a time;
#  2. the five second-seed cells of issue 28 §1's table (../2026-12-06-s11-lead1/table.md: H200
#     chat@200, mixed@100, rl@100, CPU mixed@70, rl@70, seed 2; kvcascade alone, 5,000 requests);
#  3. issue 28 §2 with the holders' rule on 16 cores: one against four routers, H200 rl mix,
#     seed 1, 5,000 requests, as ../2026-12-07-s23-routers-16core/pairs.sh (pairs i and i+100
#     a round, up to 12 rounds).
set -u
export LD_LIBRARY_PATH=$PWD/gpu-bin/lib:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
mkdir -p "$OUT/b"
lscpu | grep -E "Model name|^CPU\(s\)" | tee "$OUT/b/host.txt"
gunzip -k gpu-bin/mooncake-x4.jsonl.gz
h200() {
  timeout 200 gpu-bin/kvcascade bench routing --sim-preset h200-llama3-8b --replicas 16 \
    --trace gpu-bin/mooncake-x4.jsonl --policy kvcascade \
    --out "$OUT/b/h200-$1.json" 2>&1 | grep -v '^  \[' >"$OUT/b/h200-$1.txt"
}
h200 r1 & h200 r2 & h200 r3 & h200 r4 &
wait
stamp "h200 round done"
for f in "$OUT"/b/h200-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
done | tee "$OUT/summary-b.txt"
cell() {  # name preset mix rate seed
  timeout 200 gpu-bin/kvcascade bench routing --sim-preset "$2" --replicas 16 --requests 5000 \
    --mix "$3" --rate "$4" --seed "$5" --policy kvcascade --out "$OUT/b/$1-s$5.json" 2>&1 |
    grep -v '^  \[' >"$OUT/b/$1-s$5.txt"
}
cell h200-chat h200-llama3-8b chat 200 2 & cell h200-mixed h200-llama3-8b mixed 100 2 &
cell h200-rl h200-llama3-8b rl 100 2 & cell cpu-mixed cpu-llama3-8b mixed 70 2 &
wait
cell cpu-rl cpu-llama3-8b rl 70 2
stamp "cells done"
for f in "$OUT"/b/*-s2.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[^ ]+ +kvcascade ' "$f" | head -1)"
done | tee -a "$OUT/summary-b.txt"
replay() {  # pair, routers
  timeout 120 gpu-bin/kvcascade bench routing --replicas 16 --requests 5000 --mix rl --seed 1 \
    --policy kvcascade --routers "$2" >"$OUT/b/rl-r$2-$1.txt" 2>&1
}
for i in $(seq 1 12); do  # a round took 14 s in the twenty-third session; stop by 450 s
  [ $(($(date +%s) - t0)) -gt 450 ] && break
  replay "$i" 1 & replay "$i" 4 & replay $((i + 100)) 1 & replay $((i + 100)) 4 &
  wait
  stamp "pairs round $i done"
done
for f in "$OUT"/b/rl-r1-*.txt; do
  i=${f##*-}; i=${i%.txt}
  for n in 1 4; do
    g="$OUT/b/rl-r$n-$i.txt"
    echo "pair $i routers $n: $(grep -E '^rl +kvcascade' "$g" | awk '{print $5, $6, $7, $9, $10, $11, $14}')"
  done
done | tee "$OUT/pairs-summary.txt"
tar czf "$OUT/b.tar.gz" -C "$OUT" b && rm -rf "${OUT:?}/b"
